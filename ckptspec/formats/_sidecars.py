"""Where the programs exported beside a checkpoint lie. Kept apart from their readers, which
validating a checkpoint without such a file does not need."""

from __future__ import annotations

from pathlib import Path

from .._storage import location, with_suffix_added

__all__ = ["KERAS_PROGRAM_SUFFIX", "PROGRAM_SUFFIX", "keras_program_path_for", "program_path_for"]

PROGRAM_SUFFIX = ".pt2"
KERAS_PROGRAM_SUFFIX = ".keras"


def program_path_for(checkpoint: str | Path) -> Path:
    """The exported program's place beside a checkpoint: `<checkpoint>.pt2`."""
    return with_suffix_added(location(checkpoint), PROGRAM_SUFFIX)


def keras_program_path_for(checkpoint: str | Path) -> Path:
    """The exported Keras model's place beside a TensorFlow checkpoint prefix."""
    return with_suffix_added(location(checkpoint), KERAS_PROGRAM_SUFFIX)
