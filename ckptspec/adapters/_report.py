"""The report every adapter returns from a restore that passed; framework-free."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._models import Manifest
from ._next_batches import DataOrderCheck
from .._exceptions import RestoreNote
from ._spec import COMPONENTS

__all__ = ["FingerprintReplay", "HyperparameterChange", "RestoreReport", "report_notes", "restored_components"]


@dataclass(frozen=True)
class HyperparameterChange:
    """An optimizer setting the restore changed on purpose: `applied` replaced the loaded `saved` value."""

    name: str
    """The framework's own name for the setting (`lr` in PyTorch, `learning_rate` in Keras)."""
    saved: Any
    applied: Any
    optimizer: int = 0
    """Where: the index of the optimizer ..."""
    group: int = 0
    """... and of its parameter group (Keras optimizers have one)."""


@dataclass(frozen=True)
class FingerprintReplay:
    """The fixed batch run through the restored model, against the outputs saved with the checkpoint."""

    outputs: int
    max_abs_difference: float
    atol: float
    rtol: float


@dataclass(frozen=True)
class RestoreReport:
    """What a restore did; returned only when it matched the manifest and the spec."""

    checkpoint: Path
    restored: tuple[str, ...]
    """Components restored, `model` first."""
    not_restored: tuple[str, ...]
    """Components the checkpoint holds that the spec let the restore leave out."""
    tensors_saved: int
    tensors_loaded: int
    left_fresh: tuple[str, ...]
    """Model tensors or variables the spec allowed to keep their fresh values."""
    ignored: tuple[str, ...]
    """Saved tensors the spec allowed to be dropped."""
    generators: tuple[str, ...]
    """Random generators put back in their saved state."""
    changes: tuple[HyperparameterChange, ...]
    data_position: Mapping[str, Any]
    """Where the data stood when the checkpoint was saved (`epoch`, `global_step`, `batch_in_epoch`, ...)."""
    fingerprint: FingerprintReplay | None
    """The replay of the fixed batch; `None` when there was none to replay."""
    notes: tuple[str, ...] = ()
    """Differences the restore reported without refusing them (also issued as `RestoreNote` warnings):
    hyper-parameter attributes that changed, a class imported under another module path, components
    dropped as the spec allows, what an adopted checkpoint's manifest could not record."""
    data_order: DataOrderCheck | None = None
    """The batches the resumed loop draws against those the run drew after the save, checked as
    they are drawn (`status` goes from `pending` to `matched`); `None` where no loader was given."""

    @property
    def fingerprint_replayed(self) -> bool:
        return self.fingerprint is not None


def restored_components(manifest: Manifest, given: Mapping[str, bool]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The components restored (`model` and each saved one that was `given`) and those saved but not restored."""
    saved = [name for name in COMPONENTS if getattr(manifest.components, name)]
    restored = ("model", *(name for name in saved if given.get(name, False)))
    return restored, tuple(name for name in saved if not given.get(name, False))


def report_notes(checkpoint: object, notes: Sequence[str]) -> tuple[str, ...]:
    """Issues one `RestoreNote` per note, naming the checkpoint; returns the notes for the report."""
    for note in notes:
        warnings.warn(f"{checkpoint}: {note}", RestoreNote, stacklevel=3)
    return tuple(notes)
