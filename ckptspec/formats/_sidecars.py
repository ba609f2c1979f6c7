"""Where the programs exported beside a checkpoint lie. Kept apart from their readers, which
validating a checkpoint without such a file does not need."""

from __future__ import annotations

import re
from pathlib import Path

from .._storage import location, with_suffix_added

__all__ = ["KERAS_PROGRAM_SUFFIX", "PROGRAM_SUFFIX", "keras_program_path_for", "next_batches_of", "next_batches_path_for", "program_path_for"]

PROGRAM_SUFFIX = ".pt2"
KERAS_PROGRAM_SUFFIX = ".keras"


def program_path_for(checkpoint: str | Path) -> Path:
    """The exported program's place beside a checkpoint: `<checkpoint>.pt2`."""
    return with_suffix_added(location(checkpoint), PROGRAM_SUFFIX)


def keras_program_path_for(checkpoint: str | Path) -> Path:
    """The exported Keras model's place beside a TensorFlow checkpoint prefix."""
    return with_suffix_added(location(checkpoint), KERAS_PROGRAM_SUFFIX)


_NEXT_BATCHES = re.compile(r"(?P<checkpoint>.+)\.next-batches-(?P<rank>0|[1-9][0-9]{0,5})\.json")


def next_batches_path_for(checkpoint: str | Path, rank: int) -> Path:
    """Where one rank's record of the batches drawn after a save lies: `<checkpoint>.next-batches-<rank>.json`."""
    return Path(f"{checkpoint}.next-batches-{rank}.json")


def next_batches_of(name: str) -> str | None:
    """The checkpoint name whose record of next batches `name` is; None for any other name."""
    matched = _NEXT_BATCHES.fullmatch(name)
    return matched["checkpoint"] if matched is not None else None
