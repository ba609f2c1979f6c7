"""Tell which format a path holds, from magic bytes and file names, before any reader runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._inspection import Inspection

__all__ = ["DetectedCheckpoint", "detect", "inspect_checkpoint"]

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_TORCH_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")
_TF_DATA_SUFFIX = re.compile(r"\.data-\d{5}-of-\d{5}$")

Kind = Literal["torch-zip", "tf-bundle"]


@dataclass(frozen=True)
class DetectedCheckpoint:
    kind: Kind
    path: Path
    """The torch file, or the TF bundle prefix (without `.index`)."""


def detect(path: str | Path) -> DetectedCheckpoint:
    """Locate the checkpoint at `path` and name its format, or raise a `ReaderError` saying why not."""
    path = Path(path)
    if path.is_dir():
        return _detect_directory(path)
    if path.is_file():
        return _detect_file(path)
    if Path(f"{path}.index").is_file():
        return DetectedCheckpoint("tf-bundle", path)
    raise ReaderError(f"{path}: no such file, directory or TensorFlow checkpoint prefix")


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
            f"{path}: legacy (pre-1.6) torch.save format; re-save it with a current torch to inspect it"
        )
    if head.startswith(b"PYTORCH1"):
        raise UnsupportedFormatError(f"{path}: torch preview-release archive (PYTORCH1), not supported")
    raise UnsupportedFormatError(
        f"{path}: not a checkpoint ckptspec reads (expected a torch zip archive or a TensorFlow bundle)"
    )


def _detect_directory(path: Path) -> DetectedCheckpoint:
    names = {child.name for child in path.iterdir()}
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
    from .torchzip import inspect_torch_checkpoint

    return inspect_torch_checkpoint(found.path)
