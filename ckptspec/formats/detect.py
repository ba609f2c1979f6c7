"""Tell which format a path holds, from magic bytes and file names, before any reader runs.

Only regular files are ever opened: a FIFO or a device is named, never read, since reading one can
block forever or never end.
"""

from __future__ import annotations

import errno
import functools
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._storage import STRUCTURE_BLOCK, Location, RemotePath, location, open_binary
from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from .._filetypes import special_file_kind
from ._io import regular_file_size, unreadable
from ._names import (
    LEGACY_TORCH_MAGIC,
    LIGHTNING_META,
    SAFETENSORS_INDEX_SUFFIX,
    ZIP_MAGIC,
    DetectedCheckpoint,
    Kind,
    is_dcp_directory,
    is_dcp_file,
    is_deepspeed_directory,
    prefix_file,
    tf_prefix_of,
    tf_shard_prefix,
    training_directory_kind,
)
from ._zip_kinds import torch_could_load, zip_kind

__all__ = [
    "FORMATS",
    "KINDS",
    "CheckpointKind",
    "FileFormat",
    "Head",
    "detect",
    "detect_sniffed",
    "sniff",
]


def detect(path: str | Path) -> DetectedCheckpoint:
    """Locate the checkpoint at `path` and name its format, or raise a `ReaderError` saying why not."""
    path = location(path)
    mode = _mode(path)
    if mode is None:
        return _detect_prefix(path)
    if stat.S_ISDIR(mode):
        return _detect_directory(path)
    if stat.S_ISREG(mode):
        return _detect_file(path)
    raise _not_regular(path, mode)


def _mode(path: Path) -> int | None:
    """The file type and permissions of what `path` leads to, or None when nothing is there."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        if path.is_symlink():
            raise ReaderError(
                f"{path}: broken symlink: it points to {os.readlink(path)}, which leads to no file"
            ) from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReaderError(f"{path}: symlink loop: following its links never reaches a file") from None
        raise unreadable(path, exc) from None


def _not_regular(path: Path, mode: int) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"{path}: not a regular file but {special_file_kind(mode)}; ckptspec reads checkpoint files, "
        "directories and TensorFlow prefixes"
    )


def _detect_prefix(path: Path) -> DetectedCheckpoint:
    index = prefix_file(path, ".index")
    mode = _mode(index)
    if mode is None:
        raise ReaderError(f"{path}: no such file, directory or TensorFlow checkpoint prefix")
    if stat.S_ISDIR(mode):
        raise ReaderError(f"{index}: is a directory, not the index file of TensorFlow checkpoint {path}")
    if not stat.S_ISREG(mode):
        raise _not_regular(index, mode)
    return DetectedCheckpoint("tf-bundle", path)


def _detect_file(path: Path) -> DetectedCheckpoint:
    if path.name.endswith(SAFETENSORS_INDEX_SUFFIX):
        return DetectedCheckpoint("safetensors", path)
    return detect_sniffed(path, sniff(path))


def detect_sniffed(path: Path, found: FileFormat | None) -> DetectedCheckpoint:
    """What `detect` names the regular file at `path`, whose content `sniff` found to be `found`
    (for a caller that sniffed it already: the file is not sniffed again)."""
    if found is not None and found.reader == "torch-zip":
        return DetectedCheckpoint(zip_kind(path), path)
    if found is not None and found.reader is not None and found.reader != "tf-bundle":
        return DetectedCheckpoint(found.reader, path)
    if found is not None and found.runs_code:
        # Named like a TensorFlow file or not, a loader would run it: its content decides.
        raise UnsupportedFormatError(f"{path}: {found.description}; {found.refusal}")
    if (prefix := tf_prefix_of(path)) is not None:
        return DetectedCheckpoint("tf-bundle", prefix)
    if found is not None:
        raise UnsupportedFormatError(f"{path}: {found.description}; {found.refusal}")
    raise UnsupportedFormatError(
        f"{path}: not a checkpoint ckptspec reads (expected a torch zip archive, a TensorFlow bundle, "
        "a safetensors or Keras file, or a pickle)"
    )


# --------------------------------------------------------------------------------------------------
# Formats by content


@dataclass(frozen=True)
class Head:
    """What sniffing looks at: a file's first and last bytes and its size."""

    path: Path
    first: bytes
    last: bytes
    size: int


@dataclass(frozen=True)
class FileFormat:
    """A format recognised by content alone, whatever the file is named.

    To add one: write its `matches` test over a `Head` and put it in `FORMATS` before any format
    whose test it would also pass; when ckptspec gains a reader for it, set `reader` to the kind
    `detect` returns and give that kind its row in `KINDS`.
    """

    name: str
    description: str
    """What it is, for messages and `audit --help`: `a torch zip archive (torch.save ≥ 1.6, ...)`."""
    matches: Callable[[Head], bool]
    reader: Kind | None = None
    """The checkpoint kind ckptspec judges it as; None: not judged."""
    runs_code: bool = False
    """Whether the usual loader of such a file can run code from it (a pickle or bytecode inside):
    then a file ckptspec cannot judge is a finding, never a skip."""

    @property
    def refusal(self) -> str:
        if self.runs_code:
            return "loading it can run code, and ckptspec cannot judge this format yet"
        return "it holds no code a loader would run"


_SNIFF_BYTES = 512
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_COMPRESSED_MAGICS = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd", b"ZF")


def _is_zlib(head: Head) -> bool:
    # joblib's default compressor: a zlib stream, whose two-byte header is a multiple of 31.
    first = head.first[:2]
    return len(first) == 2 and first[0] == 0x78 and int.from_bytes(first, "big") % 31 == 0


def _is_safetensors(head: Head) -> bool:
    from .safetensors import looks_like_safetensors

    return looks_like_safetensors(head.first, head.size)


def _is_pickle(head: Head) -> bool:
    from ._pickle_protocol import sniff_pickle_protocol

    if tf_shard_prefix(head.path.name) is not None and not (head.first[:1] == pickle.PROTO and head.last.endswith(pickle.STOP)):
        # A data shard's raw tensor bytes may open like a PROTO opcode (int32 640 does): a pickle
        # placed there must also end in STOP. Shards are large: they are never parsed whole to find
        # a protocol 0 or 1 pickle, which only torch's own zip or legacy files would hold.
        return False
    return sniff_pickle_protocol(head.path, head.first) is not None


def _is_zip_after_prefix(head: Head) -> bool:
    """Whether a zip archive that `zipfile` opens ends the file, after bytes of no other format."""
    if b"PK\x05\x06" not in head.last:
        return False
    import zipfile

    try:
        with open_binary(head.path, block=STRUCTURE_BLOCK) as handle, zipfile.ZipFile(handle):
            return True
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def _is_sstable(head: Head) -> bool:
    from .sstable import FOOTER_LENGTH, TABLE_MAGIC

    return head.size >= FOOTER_LENGTH and head.last.endswith(TABLE_MAGIC)


def _npy_head(head: Head) -> bytes:
    """Enough of a `.npy` file to hold its header (the first sniffed bytes, when they do)."""
    if len(head.first) >= head.size or len(head.first) >= 10 + int.from_bytes(head.first[8:10], "little"):
        return head.first
    from ._npy import NPY_HEADER_LIMIT

    with open_binary(head.path, block=STRUCTURE_BLOCK) as handle:
        return handle.read(16 + NPY_HEADER_LIMIT)


_NPZ_HEADER_BYTES = 4096
"""Enough of a member to hold its `.npy` header (numpy writes it padded to a multiple of 64 bytes)."""


@functools.lru_cache(maxsize=1)  # both `.npz` formats ask in turn about the same file
def _npz_arrays(head: Head) -> tuple[bytes, ...] | None:
    """The opening bytes of every member of a NumPy `.npz` archive (`numpy.savez`, whose members are
    all `.npy` arrays); None when `head` is no such archive. Inflates at most a few KiB per member,
    so the work grows with the members the central directory lists, which the file's bytes bound."""
    if not head.first.startswith(ZIP_MAGIC):
        return None
    length = int.from_bytes(head.first[26:28], "little")
    if not head.first[30 : 30 + length].endswith(b".npy") or torch_could_load(head.path):
        return None
    import lzma
    import zipfile
    import zlib

    try:
        remote = isinstance(head.path, RemotePath)
        with zipfile.ZipFile(open_binary(head.path, block=STRUCTURE_BLOCK) if remote else head.path) as archive:
            members = archive.infolist()
            if not all(member.filename.endswith(".npy") for member in members):
                return None
            return tuple(_member_head(archive, member) for member in members)
    except (OSError, ValueError, EOFError, RuntimeError, NotImplementedError, zipfile.BadZipFile, zlib.error, lzma.LZMAError):
        return None  # damaged: judged as the zip archive it is, whose reader names what is wrong


def _member_head(archive: Any, member: Any) -> bytes:
    with archive.open(member) as stream:
        return stream.read(_NPZ_HEADER_BYTES)


def _is_npz_of_objects(head: Head) -> bool:
    arrays = _npz_arrays(head)
    return arrays is not None and any(_may_hold_objects(array) for array in arrays)


def _may_hold_objects(array: bytes) -> bool:
    """Whether a `.npy` array opening with `array` may hold a pickle: its dtype as NumPy parses it, never a
    spelling; a header that does not parse (or is longer than the bytes read) is judged by the container reader."""
    from ._npy import NpyHeaderError, read_npy_header

    try:
        return read_npy_header(array).may_hold_objects
    except NpyHeaderError:
        return True


FORMATS: tuple[FileFormat, ...] = (
    FileFormat(
        "numpy-npz-objects",
        "a NumPy .npz archive holding arrays of Python objects, stored as pickles (numpy.load(allow_pickle=True) runs them)",
        _is_npz_of_objects,
        reader="archive",
        runs_code=True,
    ),
    FileFormat("numpy-npz", "a NumPy .npz archive of arrays", lambda head: _npz_arrays(head) is not None),
    FileFormat(
        "torch-zip",
        "a zip archive, as torch.save (≥ 1.6), Lightning, torch.jit.save and Keras (.keras) write",
        lambda head: head.first.startswith(ZIP_MAGIC),
        reader="torch-zip",
        runs_code=True,
    ),
    FileFormat(
        "legacy-torch",
        "a legacy (pre-1.6) torch.save file: a sequence of pickles",
        lambda head: head.first.startswith(LEGACY_TORCH_MAGIC),
        reader="torch-legacy",
        runs_code=True,
    ),
    FileFormat(
        "torch-preview",
        "a torch preview-release archive (PYTORCH1)",
        lambda head: head.first.startswith(b"PYTORCH1"),
        runs_code=True,
    ),
    FileFormat(
        "numpy-objects",
        "a NumPy .npy array of Python objects, stored as a pickle",
        lambda head: head.first.startswith(b"\x93NUMPY") and _may_hold_objects(_npy_head(head)),
        reader="archive",
        runs_code=True,
    ),
    FileFormat("numpy", "a NumPy .npy array", lambda head: head.first.startswith(b"\x93NUMPY")),
    FileFormat("gguf", "a GGUF model file, as llama.cpp reads", lambda head: head.first.startswith(b"GGUF")),
    FileFormat(
        "hdf5",
        "an HDF5 file, as Keras writes weights (.weights.h5, .h5; Keras 2 models may hold Lambda layers' bytecode)",
        lambda head: head.first.startswith(_HDF5_SIGNATURE),
        reader="keras",
        runs_code=True,
    ),
    FileFormat(
        "compressed",
        "a compressed stream (joblib and other loaders decompress and unpickle such files)",
        lambda head: head.first.startswith(_COMPRESSED_MAGICS) or _is_zlib(head),
        reader="archive",
        runs_code=True,
    ),
    FileFormat(
        "tar",
        "a tar archive (torch.load reads the legacy format of torch < 0.4 from one: storages, tensors, pickle)",
        lambda head: head.first[257:262] == b"ustar",
        reader="archive",
        runs_code=True,
    ),
    FileFormat("7z", "a 7z archive", lambda head: head.first.startswith(b"7z\xbc\xaf\x27\x1c"), reader="archive", runs_code=True),
    FileFormat("safetensors", "a safetensors file", _is_safetensors, reader="safetensors"),
    FileFormat("tf-index", "a TensorFlow bundle index (SSTable)", _is_sstable, reader="tf-bundle"),
    FileFormat("pickle", "a pickle, as pickle.dump, joblib and torch.load read", _is_pickle, reader="pickle", runs_code=True),
    FileFormat(
        "zip-after-prefix",
        "bytes followed by a zip archive (zipfile and torch's reader accept the prefix)",
        _is_zip_after_prefix,
        reader="archive",
        runs_code=True,
    ),
)
"""Tried in order; the first that matches names the file."""

SNIFF_SIZE_LIMIT = 1 << 50
"""Sniffing reads a few hundred bytes of a file of any size (and a whole text pickle of at most
`_pickle_protocol.TEXT_PICKLE_LIMIT`)."""


def sniff(path: Path) -> FileFormat | None:
    """The format of the regular file at `path`, from its content; None when none matches.

    Raises `ReaderError` when `path` is not a regular file (never opened then) or cannot be read,
    `CorruptCheckpointError` when it is empty.
    """
    size = regular_file_size(path, SNIFF_SIZE_LIMIT)
    if size == 0:
        raise CorruptCheckpointError(f"{path}: empty file")
    first, last = _first_and_last(path, size)
    head = Head(path, first, last, size)
    return next((found for found in FORMATS if found.matches(head)), None)


def _first_and_last(path: Location, size: int) -> tuple[bytes, bytes]:
    if isinstance(path, RemotePath):
        from ._source import open_source

        source = open_source(path)
        try:
            return source.pread(0, _SNIFF_BYTES), source.pread(max(size - _SNIFF_BYTES, 0), _SNIFF_BYTES)
        finally:
            source.close()
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.pread(descriptor, _SNIFF_BYTES, 0), os.pread(descriptor, _SNIFF_BYTES, max(size - _SNIFF_BYTES, 0))
        finally:
            os.close(descriptor)
    except OSError as exc:
        raise unreadable(path, exc) from None


def _detect_directory(path: Path) -> DetectedCheckpoint:
    try:
        names = {child.name for child in path.iterdir()}
    except OSError as exc:
        raise unreadable(path, exc) from None
    if training := training_directory_kind(names):  # before DeepSpeed: a Trainer checkpoint may hold its `latest`
        return DetectedCheckpoint(training, path)
    if is_dcp_directory(names):
        return DetectedCheckpoint("dcp" if any(map(is_dcp_file, names)) else "dcp-hf", path)
    if is_deepspeed_directory(names):
        return DetectedCheckpoint("deepspeed", path)
    if LIGHTNING_META in names:
        raise UnsupportedFormatError(
            f"{path}: Lightning sharded checkpoint directory ({LIGHTNING_META}); not read yet"
        )
    if "checkpoint" in names:
        from .tf_state import latest_checkpoint

        try:
            return DetectedCheckpoint("tf-bundle", latest_checkpoint(path))
        except ReaderError:
            if not any(name.endswith(".index") for name in names):
                raise
            # The state file points elsewhere (the writer's own disk, a deleted save): the bundle that
            # is here is still read; `audit` reports the pointer on the state file.
    safetensors_indexes = [name for name in names if name.endswith(SAFETENSORS_INDEX_SUFFIX)]
    if len(safetensors_indexes) == 1:
        return DetectedCheckpoint("safetensors", path / safetensors_indexes[0])
    indexes = sorted(name for name in names if name.endswith(".index"))
    if len(indexes) == 1:
        return DetectedCheckpoint("tf-bundle", path / indexes[0][: -len(".index")])
    raise ReaderError(
        f"{path}: a directory, not one checkpoint; name a checkpoint file or TensorFlow prefix "
        "(`ckptspec audit` reads whole directories)"
    )


@dataclass(frozen=True)
class CheckpointKind:
    """What ckptspec knows of one kind of checkpoint `detect` names: the one place a kind is wired in."""

    description: str
    """What it is, for messages: `a TensorFlow checkpoint`."""
    inspector: str
    """`module:function` in `ckptspec.formats`: its summary for `ckptspec inspect`."""
    view: str
    """`module:function` in `ckptspec._views`: its `CheckpointView`, for validation, adoption and diff.
    Named, not imported, so the readers never import the layer above them."""


KINDS: dict[Kind, CheckpointKind] = {
    "torch-zip": CheckpointKind("a torch.save archive", "torchzip:inspect_torch_checkpoint", "torchzip:torch_view"),
    "torch-legacy": CheckpointKind("a legacy (pre-1.6) torch.save file", "legacy_torch:inspect_legacy_checkpoint", "torchzip:legacy_torch_view"),
    "torchscript": CheckpointKind("a TorchScript archive (torch.jit.save)", "torchscript:inspect_torchscript", "torchzip:torchscript_view"),
    "safetensors": CheckpointKind("a safetensors file", "safetensors:inspect_safetensors", "safetensors:safetensors_view"),
    "keras": CheckpointKind("a Keras file", "keras:inspect_keras", "keras:keras_view"),
    "tf-bundle": CheckpointKind("a TensorFlow checkpoint", "tfbundle:inspect_bundle", "tfbundle:tf_view"),
    "pickle": CheckpointKind("a bare pickle", "barepickle:inspect_pickle", "barepickle:pickle_view"),
    "dcp": CheckpointKind("a torch.distributed.checkpoint directory", "dcp:inspect_dcp_directory", "dcp:dcp_view"),
    "dcp-hf": CheckpointKind(
        "a torch.distributed.checkpoint save in the Hugging Face storage layout", "hf_storage:inspect_hf_storage", "dcp:hf_storage_view"
    ),
    "deepspeed": CheckpointKind("a DeepSpeed checkpoint directory", "deepspeed:inspect_deepspeed", "deepspeed:deepspeed_view"),
    "archive": CheckpointKind("a container of pickles", "containers:inspect_container", "barepickle:container_view"),
    "hf-trainer": CheckpointKind(
        "a Hugging Face Trainer checkpoint directory", "hf_training:inspect_training_directory", "hf_training:training_view"
    ),
    "accelerate": CheckpointKind(
        "an Accelerate save_state directory", "hf_training:inspect_training_directory", "hf_training:training_view"
    ),
}
"""Every kind, its inspector and its view builder; their modules are imported only when a
checkpoint of that kind is read."""


