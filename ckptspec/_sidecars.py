"""Every name a checkpoint's companions bear: its manifest, a pending manifest and the save's lock,
the exported programs, the signature, the records of the batches drawn after a save. One place, so
that the writers, the readers and discovery agree on them."""

from __future__ import annotations

import re
from pathlib import Path

from ._storage import Location, exists_or_link, is_directory, location, with_suffix_added

__all__ = [
    "KERAS_PROGRAM_SUFFIX",
    "LOCK_SUFFIX",
    "MANIFEST_SUFFIX",
    "PENDING_SUFFIX",
    "PROGRAM_SUFFIX",
    "SIGNATURE_SUFFIX",
    "TRAINER_STATE",
    "checkpoint_of_manifest",
    "keras_program_path_for",
    "manifest_path_for",
    "next_batches_of",
    "next_batches_owner",
    "next_batches_path_for",
    "program_path_for",
    "signature_path_for",
]

MANIFEST_SUFFIX = ".ckptspec.yaml"
PENDING_SUFFIX = ".ckptspec.pending.yaml"
"""A save's new manifest, beside the checkpoint until the new checkpoint is in place."""
LOCK_SUFFIX = ".ckptspec.lock"
"""The advisory lock that serialises the saves to one path."""
PROGRAM_SUFFIX = ".pt2"
KERAS_PROGRAM_SUFFIX = ".keras"
SIGNATURE_SUFFIX = ".sig"
TRAINER_STATE = "trainer_state.json"
"""The file every Trainer checkpoint holds, written last: it marks a directory as one (and the
manifest lies inside it)."""


def program_path_for(checkpoint: str | Path) -> Path:
    """The exported program's place beside a checkpoint: `<checkpoint>.pt2`."""
    return with_suffix_added(location(checkpoint), PROGRAM_SUFFIX)


def keras_program_path_for(checkpoint: str | Path) -> Path:
    """The exported Keras model's place beside a TensorFlow checkpoint prefix."""
    return with_suffix_added(location(checkpoint), KERAS_PROGRAM_SUFFIX)


_NEXT_BATCHES = re.compile(r"(?P<checkpoint>.+)\.next-batches-(?P<rank>0|[1-9][0-9]{0,5})\.json")


_INSIDE = MANIFEST_SUFFIX.removesuffix(".yaml")
"""The name a companion inside a Trainer `checkpoint-N/` bears where one beside a file bears the file's."""


def next_batches_path_for(checkpoint: str | Path, rank: int) -> Path:
    """Where one rank's record of the batches drawn after a save lies: `<checkpoint>.next-batches-<rank>.json`;
    inside a Trainer `checkpoint-N/`, as its manifest is, `.ckptspec.next-batches-<rank>.json`."""
    if _is_trainer_directory(location(checkpoint)):
        return Path(checkpoint) / f"{_INSIDE}.next-batches-{rank}.json"
    return Path(f"{checkpoint}.next-batches-{rank}.json")


def next_batches_of(name: str) -> str | None:
    """The checkpoint name whose record of next batches `name` is; None for any other name."""
    matched = _NEXT_BATCHES.fullmatch(name)
    return matched["checkpoint"] if matched is not None else None


def next_batches_owner(record: Location) -> Location | None:
    """The checkpoint whose record of next batches lies at `record`, whether it is there or not; None
    for any other name."""
    named = next_batches_of(record.name)
    if named is None:
        return None
    return record.parent if named == _INSIDE else record.with_name(named)


def checkpoint_of_manifest(manifest: Location) -> Location:
    """The checkpoint a manifest at `manifest` describes: the file beside it, or the Trainer `checkpoint-N/` it lies in."""
    return manifest.parent if manifest.name == MANIFEST_SUFFIX else manifest.with_name(manifest.name.removesuffix(MANIFEST_SUFFIX))


def manifest_path_for(checkpoint: str | Path) -> Path:
    """The manifest's place beside a checkpoint file, TensorFlow prefix or directory; inside a
    Trainer `checkpoint-N/`, which the Trainer deletes whole when it rotates checkpoints."""
    path = location(checkpoint)
    if _is_trainer_directory(path):
        return path / MANIFEST_SUFFIX
    return with_suffix_added(path, MANIFEST_SUFFIX)


def _is_trainer_directory(path: Location) -> bool:
    return is_directory(path) and exists_or_link(path / TRAINER_STATE)


def signature_path_for(checkpoint: str | Path) -> Path:
    """The signature's place beside a checkpoint file, TensorFlow prefix or checkpoint directory."""
    return with_suffix_added(location(checkpoint), SIGNATURE_SUFFIX)
