"""Open the view of any checkpoint: the builder of its kind, as `formats.detect.KINDS` names it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._scan import FileDigests
from ..formats._io import unreadable
from ..formats.detect import KINDS, detect
from ..formats._names import DetectedCheckpoint, Kind
from .base import CheckpointView, ViewRequest

if TYPE_CHECKING:
    from ..formats.dcp import KnownSave

__all__ = ["open_view", "view_builder"]

ViewBuilder = Callable[[Path, ViewRequest], CheckpointView]


def open_view(
    path: Path | DetectedCheckpoint,
    *,
    trusted_tensors: Collection[str] = (),
    recorded: Mapping[Path, FileDigests] | None = None,
    verify_slices: bool = True,
    known_save: KnownSave | None = None,
) -> CheckpointView:
    """Read the checkpoint at `path` (file, TensorFlow prefix, DCP or DeepSpeed directory, or directory
    holding one) into a view; `path` may be what `detect` found there already, which is not sniffed again.

    Raises a `ReaderError` when nothing at `path` is a checkpoint ckptspec reads, or a file of it
    cannot be read; structural damage found while reading is raised too, damage to bytes is listed in
    `problems`. Every checksum a format stores is verified, except that a torch archive's records
    holding only `trusted_tensors` (pointers whose CRC32C the caller checks against a manifest) are
    not read twice. Each file is read once in all: with its digests recorded (`recorded`, by
    resolved path) they (and a torch file's trusted tensor CRC32Cs) come from one pass, and a file
    whose CRC32C matches the recorded one has no stored checksum left to check. With
    `verify_slices=False` a DCP directory's slices are read only where a value or a checksum is
    asked for (building a manifest, which judges nothing); its structure is checked all the same.
    `known_save` is what the ranks that wrote a DCP directory hold of it (its committed metadata,
    its non-tensor values): that is not read again.
    """
    found = path if isinstance(path, DetectedCheckpoint) else detect(path)
    request = ViewRequest(trusted_tensors, recorded or {}, verify_slices, known_save)
    try:
        return view_builder(found.kind)(found.path, request)
    except OSError as exc:
        raise unreadable(exc.filename or found.path, exc) from None


def view_builder(kind: Kind) -> ViewBuilder:
    """The function that builds the view of a checkpoint of `kind` (its module imported only now)."""
    module, function = KINDS[kind].view.split(":")
    builder: ViewBuilder = getattr(importlib.import_module(f".{module}", __package__), function)
    return builder
