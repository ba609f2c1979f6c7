"""Tell which format a path holds, from magic bytes and file names, before any reader runs.

Only regular files are ever opened: a FIFO or a device is named, never read, since reading one can
block forever or never end.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from .._filetypes import special_file_kind
from ._inspection import Inspection
from ._io import unreadable

__all__ = [
    "TF_DATA_SHARD",
    "ZIP_MAGIC",
    "DetectedCheckpoint",
    "detect",
    "inspect_checkpoint",
    "is_dcp_directory",
    "is_deepspeed_directory",
    "tf_shard_prefix",
]

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_TORCH_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")
TF_DATA_SHARD = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
"""The end of a TensorFlow data shard's name, after the prefix: shard number and shard count."""

Kind = Literal["torch-zip", "tf-bundle", "pickle", "dcp", "deepspeed"]
DEEPSPEED_LATEST = "latest"
"""The text file naming the tag directory of DeepSpeed's last finished save."""
DEEPSPEED_STATES_FILE = re.compile(r"^.*_(?:model|optim)_states\.pt$")
"""One rank's file of a DeepSpeed save, inside its tag directory."""
DCP_METADATA = ".metadata"
DCP_PENDING_METADATA = ".metadata.tmp"
DCP_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
"""`__R.metadata`: rank R's own metadata, in a DCP save without collectives."""
DCP_DATA_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
"""`__R_I.distcp`: the I-th data file of rank R."""


@dataclass(frozen=True)
class DetectedCheckpoint:
    kind: Kind
    path: Path
    """The torch file or bare pickle, the TF bundle prefix (without `.index`), or the DCP directory."""


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
        raise unreadable(path, exc) from None


def _not_regular(path: Path, mode: int) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"{path}: not a regular file but {special_file_kind(mode)}; ckptspec reads checkpoint files, "
        "directories and TensorFlow prefixes"
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
    if (prefix := tf_shard_prefix(path.name)) is not None:
        return DetectedCheckpoint("tf-bundle", path.with_name(prefix))
    try:
        with path.open("rb") as handle:
            head = handle.read(len(LEGACY_TORCH_MAGIC))
    except OSError as exc:
        raise unreadable(path, exc) from None
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


def tf_shard_prefix(name: str) -> str | None:
    """The prefix of the TensorFlow checkpoint whose data shard is named `name`, or None for another file."""
    match = TF_DATA_SHARD.search(name)
    return name[: match.start()] if match is not None else None


def is_dcp_directory(names: Collection[str]) -> bool:
    """Whether a directory holding the files `names` is a torch.distributed.checkpoint (DCP) save,
    committed or not (Lightning's sharded checkpoints are DCP saves with a `meta.pt`)."""
    return any(
        name in (DCP_METADATA, DCP_PENDING_METADATA) or DCP_RANK_METADATA.match(name) or DCP_DATA_FILE.match(name)
        for name in names
    )


def is_deepspeed_directory(names: Collection[str]) -> bool:
    """Whether a directory holding `names` is a DeepSpeed save directory (with `latest`) or one tag of it."""
    return DEEPSPEED_LATEST in names or any(DEEPSPEED_STATES_FILE.match(name) for name in names)


def _detect_directory(path: Path) -> DetectedCheckpoint:
    try:
        names = {child.name for child in path.iterdir()}
    except OSError as exc:
        raise unreadable(path, exc) from None
    if is_dcp_directory(names):
        return DetectedCheckpoint("dcp", path)
    if is_deepspeed_directory(names):
        return DetectedCheckpoint("deepspeed", path)
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
    if found.kind == "dcp":
        from .dcp import inspect_dcp_directory

        return inspect_dcp_directory(found.path)
    if found.kind == "deepspeed":
        from .deepspeed import inspect_deepspeed

        return inspect_deepspeed(found.path)
    if found.kind == "tf-bundle":
        from .tfbundle import inspect_bundle

        return inspect_bundle(found.path)
    if found.kind == "pickle":
        from .barepickle import inspect_pickle

        return inspect_pickle(found.path)
    from .torchzip import inspect_torch_checkpoint

    return inspect_torch_checkpoint(found.path)
