"""What one checkpoint tells about its place in a run: its lineage as recorded and the counters its
state holds (global step, data position, optimizer and scheduler steps, gradient scaler, random
generator digests), all read from its manifest, which an adapter wrote from the saved state or
adoption read from the file's bytes."""

from __future__ import annotations

from dataclasses import field
from datetime import datetime

from .._dataclass import dataclass
from .._models import LineageRecord, Manifest
from .._storage import Location
from ._state import inventory_digest

__all__ = ["CheckpointFacts", "facts_of"]


@dataclass(frozen=True)
class CheckpointFacts:
    """One checkpoint's lineage and counters; None where its manifest records none."""

    checkpoint: Location
    """Absolute, or a storage URL."""
    manifest_sha256: str
    created: datetime | None
    lineage: LineageRecord | None
    """None for a checkpoint whose manifest records no lineage (adopted, or written before 1.2)."""
    state: str | None
    global_step: int | None
    epoch: int | None
    samples_seen: int | None
    batch_in_epoch: int | None
    optimizer_steps: tuple[int | None, ...]
    """Per optimizer, the highest step count its param groups hold."""
    scheduler_steps: tuple[int, ...]
    learning_rates: tuple[float | None, ...]
    """Per scheduler, its first current learning rate."""
    scaler: tuple[float, int] | None
    """The gradient scaler's scale and growth tracker."""
    modified_ns: int | None = None
    """The checkpoint file's modification time, which orders the saves of a run without lineage."""
    generators: dict[tuple[int, str], str] = field(default_factory=dict)
    """(rank, generator name) → digest of its saved state; rank 0 for a single-process save."""

    @property
    def name(self) -> str:
        return str(self.checkpoint)

    @property
    def run(self) -> str | None:
        return self.lineage.run if self.lineage is not None else None

    @property
    def sequence(self) -> int | None:
        return self.lineage.sequence if self.lineage is not None else None

    @property
    def position(self) -> int | None:
        """Where the checkpoint stands in its run: the global step, else its first optimizer's step."""
        if self.global_step is not None:
            return self.global_step
        return next((step for step in self.optimizer_steps if step is not None), None)


def facts_of(checkpoint: Location, manifest: Manifest, manifest_sha256: str, *, modified_ns: int | None = None) -> CheckpointFacts:
    components = manifest.components
    position = components.data_position
    optimizer_steps = tuple(
        max((max(group.steps) for group in record.param_groups if group.steps), default=None) for record in components.optimizer or []
    )
    schedulers = components.scheduler or []
    return CheckpointFacts(
        checkpoint=checkpoint,
        manifest_sha256=manifest_sha256,
        created=_created(manifest.created),
        lineage=None if manifest.lineage is None or manifest.lineage.parent_inferred else manifest.lineage,
        state=inventory_digest(components.model),
        global_step=position.global_step if position is not None else None,
        epoch=position.epoch if position is not None else None,
        samples_seen=position.samples_seen if position is not None else None,
        batch_in_epoch=position.batch_in_epoch if position is not None else None,
        optimizer_steps=optimizer_steps,
        scheduler_steps=tuple(record.step for record in schedulers),
        learning_rates=tuple(_first_rate(record.state.get("_last_lr")) for record in schedulers),
        scaler=(components.scaler.scale, components.scaler.growth_tracker) if components.scaler is not None else None,
        modified_ns=modified_ns,
        generators=_generators(manifest),
    )


def _generators(manifest: Manifest) -> dict[tuple[int, str], str]:
    components = manifest.components
    found: dict[tuple[int, str], str] = {}
    if components.rng is not None:
        found.update({(0, item.name): item.sha256 for item in components.rng.generators if item.sha256 is not None})
    for state in components.ranks.states if components.ranks is not None else []:
        if state.rng is not None:
            found.update({(state.rank, item.name): item.sha256 for item in state.rng.generators if item.sha256 is not None})
    return found


def _first_rate(value: object) -> float | None:
    if isinstance(value, list) and value and isinstance(value[0], (int, float)) and not isinstance(value[0], bool):
        return float(value[0])
    return None


def _created(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
