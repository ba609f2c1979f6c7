"""Tell which format a path holds, from magic bytes and file names, before any reader runs.

Only regular files are ever opened: a FIFO or a device is named, never read, since reading one can
block forever or never end.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._inspection import Inspection

__all__ = ["DetectedCheckpoint", "detect", "inspect_checkpoint"]

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_TORCH_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")
_TF_DATA_SUFFIX = re.compile(r"\.data-\d{5}-of-\d{5}$")
_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

Kind = Literal["torch-zip", "tf-bundle", "pickle"]


@dataclass(frozen=True)
class DetectedCheckpoint:
    kind: Kind
    path: Path
    """The torch file or bare pickle, or the TF bundle prefix (without `.index`)."""


def detect(path: str | Path) -> DetectedCheckpoint:
    """Locate the checkpoint at `path` and name its format, or raise a `ReaderError` saying why not."""
    path = Path(path)
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
        raise ReaderError(f"{path}: cannot read: {exc.strerror}") from None


def _not_regular(path: Path, mode: int) -> UnsupportedFormatError:
    kind = next((name for is_kind, name in _FILE_TYPES if is_kind(mode)), "a special file")
    return UnsupportedFormatError(
        f"{path}: not a regular file but {kind}; ckptspec reads checkpoint files, directories and "
        "TensorFlow prefixes"
    )


def _detect_prefix(path: Path) -> DetectedCheckpoint:
    index = Path(f"{path}.index")
    mode = _mode(index)
    if mode is None:
        raise ReaderError(f"{path}: no such file, directory or TensorFlow checkpoint prefix")
    if stat.S_ISDIR(mode):
        raise ReaderError(f"{index}: is a directory, not the index file of TensorFlow checkpoint {path}")
    if not stat.S_ISREG(mode):
        raise _not_regular(index, mode)
    return DetectedCheckpoint("tf-bundle", path)


def _detect_file(path: Path) -> DetectedCheckpoint:
    if path.suffix == ".index":
        return DetectedCheckpoint("tf-bundle", path.with_suffix(""))
    if _TF_DATA_SUFFIX.search(path.name):
        return DetectedCheckpoint("tf-bundle", path.with_name(_TF_DATA_SUFFIX.sub("", path.name)))
    try:
        with path.open("rb") as handle:
            head = handle.read(len(LEGACY_TORCH_MAGIC))
    except OSError as exc:
        raise ReaderError(f"{path}: cannot read: {exc.strerror}") from None
    if not head:
        raise CorruptCheckpointError(f"{path}: empty file")
    if head.startswith(ZIP_MAGIC):
        return DetectedCheckpoint("torch-zip", path)
    if head == LEGACY_TORCH_MAGIC:
        raise UnsupportedFormatError(
            f"{path}: legacy (pre-1.6) torch.save format; re-save it with torch ≥ 1.6 to read it"
        )
    if head.startswith(b"PYTORCH1"):
        raise UnsupportedFormatError(f"{path}: torch preview-release archive (PYTORCH1), not supported")
    from .barepickle import sniff_pickle_protocol

    if sniff_pickle_protocol(path, head) is not None:
        return DetectedCheckpoint("pickle", path)
    raise UnsupportedFormatError(
        f"{path}: not a checkpoint ckptspec reads (expected a torch zip archive, a TensorFlow bundle or "
        "a pickle)"
    )


def _detect_directory(path: Path) -> DetectedCheckpoint:
    try:
        names = {child.name for child in path.iterdir()}
    except OSError as exc:
        raise ReaderError(f"{path}: cannot read: {exc.strerror}") from None
    if ".metadata" in names and any(name.endswith(".distcp") for name in names):
        raise UnsupportedFormatError(
            f"{path}: torch.distributed.checkpoint (DCP) directory; ckptspec does not read sharded "
            "checkpoints yet"
        )
    if "meta.pt" in names:
        raise UnsupportedFormatError(
            f"{path}: Lightning sharded checkpoint directory (meta.pt); not read yet"
        )
    if "checkpoint" in names:
        from .tf_state import latest_checkpoint

        return DetectedCheckpoint("tf-bundle", latest_checkpoint(path))
    indexes = sorted(name for name in names if name.endswith(".index"))
    if len(indexes) == 1:
        return DetectedCheckpoint("tf-bundle", path / indexes[0][: -len(".index")])
    raise ReaderError(
        f"{path}: a directory, not one checkpoint; name a checkpoint file or TensorFlow prefix "
        "(`ckptspec audit` reads whole directories)"
    )


def inspect_checkpoint(path: str | Path) -> Inspection:
    """Summarise any checkpoint ckptspec reads, without running pickle and without torch or TF."""
    found = detect(path)
    if found.kind == "tf-bundle":
        from .tfbundle import inspect_bundle

        return inspect_bundle(found.path)
    if found.kind == "pickle":
        from .barepickle import inspect_pickle

        return inspect_pickle(found.path)
    from .torchzip import inspect_torch_checkpoint

    return inspect_torch_checkpoint(found.path)
