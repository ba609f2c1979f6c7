"""What each save records of its run (the manifest's `lineage`): the run's id, made at the run's
first save and carried across resumes; the parent, which is the checkpoint the process resumed
from for the first save after a resume and else the previous save of the same process, named with
the digest of its manifest; the save's place in the run; and, for the first save after a resume,
what the adapter measured of the resume and found as saved.

A save that holds the same model state as the one before it (Lightning's `last.ckpt` beside each
checkpoint) is a copy of it, not its child: it gets the same parent and place.

Framework-free: each adapter keeps one `RunLedger` per run it follows (per model, trainer or
manager), tells it where the process resumed from, stamps each manifest before writing it and
notes each one written.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
import weakref
from collections.abc import Iterable
from pathlib import Path

from .._dataclass import dataclass
from .._sidecars import manifest_path_for
from .._models import LineageParent, LineageRecord, Manifest, Retention
from ..lineage._state import inventory_digest
from ._next_batches import DataOrderCheck

__all__ = ["RunLedger", "ledger_for"]


@dataclass(frozen=True)
class _Save:
    """A checkpoint as a later save names it: where it is (absolute), its manifest's digest, its
    model's state digest, its global step, and its own lineage with its parent's path absolute too."""

    path: Path
    manifest_sha256: str
    state: str | None
    global_step: int | None
    lineage: LineageRecord


class RunLedger:
    """The lineage of the saves of one run in this process."""

    def __init__(self) -> None:
        self._run: str | None = None
        self._resumed_from: _Save | None = None
        self._resumed_ns: int | None = None
        self._fork = False
        self._last: _Save | None = None
        self._attested: tuple[tuple[str, ...], DataOrderCheck | None] | None = None

    def resumed(self, checkpoint: Path, manifest_path: Path, manifest: Manifest, *, fork: bool = False) -> None:
        """The process continues from `checkpoint` (with `manifest`, read from `manifest_path`); with
        `fork`, its next save begins a new run from it."""
        self._resumed_from = _saved(checkpoint, manifest_path, manifest)
        self._resumed_ns = time.time_ns()
        recorded = self._resumed_from.lineage
        self._fork = fork
        self._run = recorded.run if not fork else None
        self._last = None
        self._attested = None

    def attested(self, measured: Iterable[str], data_order: DataOrderCheck | None = None) -> None:
        """The resume was measured: `measured` were found as saved, and `data_order` checks the first
        batches (read when the next save is stamped, by then `matched` or still `pending`)."""
        self._attested = (tuple(measured), data_order)

    def stamp(self, manifest: Manifest, checkpoint: Path, *, start_sha256: str | None = None, retention: Retention | None = None) -> Manifest:
        """`manifest` (of the save at `checkpoint`) with its lineage; `retention` is how the writer
        removes the run's checkpoints as it saves more, where it does."""
        state = inventory_digest(manifest.components.model)
        copied = self._last if self._last is not None else (self._resumed_from if not self._fork else None)
        if copied is not None and state is not None and (state, _global_step(manifest)) == (copied.state, copied.global_step):
            # The same save written again (`last.ckpt`): a copy. Weights unchanged at a later step (no
            # optimizer step between the saves, as under a long gradient accumulation) are a child.
            record = copied.lineage
        else:
            record = self._child_record(start_sha256)
        if retention is not None:
            record = record.model_copy(update={"retention": retention})
        return manifest.model_copy(update={"lineage": _relative(record, Path(os.path.abspath(checkpoint)).parent)})

    def saved(self, checkpoint: Path, manifest: Manifest) -> None:
        """The save at `checkpoint` is written with `manifest` (as `stamp` returned it): it is the
        next save's parent."""
        self._last = _saved(checkpoint, manifest_path_for(checkpoint), manifest)

    def _child_record(self, start_sha256: str | None) -> LineageRecord:
        if self._run is None:
            self._run = uuid.uuid4().hex
        resumed = self._last is None and self._resumed_from is not None
        parent = self._last if self._last is not None else self._resumed_from
        if parent is None:
            return LineageRecord(run=self._run, sequence=0, start_sha256=start_sha256)
        fork = resumed and self._fork
        before = parent.lineage.sequence
        return LineageRecord(
            run=self._run,
            sequence=0 if fork else (before + 1 if before is not None else None),
            parent=LineageParent(
                checkpoint=str(parent.path),  # absolute here; `stamp` makes it relative to the saving checkpoint
                manifest_sha256=parent.manifest_sha256,
                state_sha256=parent.state,
                run=parent.lineage.run,
                sequence=before,
                resumed=resumed,
                resumed_ns=self._resumed_ns if resumed else None,
                fork=fork,
                attested=self._attested_names() if resumed else None,
            ),
        )

    def _attested_names(self) -> list[str] | None:
        if self._attested is None:
            return None
        measured, data_order = self._attested
        matched = ("data_order",) if data_order is not None and data_order.status == "matched" else ()
        return sorted({*measured, *matched})


def _saved(checkpoint: Path, manifest_path: Path, manifest: Manifest) -> _Save:
    path = Path(os.path.abspath(checkpoint))
    record = manifest.lineage or LineageRecord(parent_inferred=True)
    if record.parent is not None:  # its parent's path, absolute: a copy of it may be saved elsewhere
        absolute = os.path.normpath(path.parent / record.parent.checkpoint)
        record = record.model_copy(update={"parent": record.parent.model_copy(update={"checkpoint": absolute})})
    digest = hashlib.sha256(manifest_path.read_bytes()).hexdigest()
    return _Save(path, digest, inventory_digest(manifest.components.model), _global_step(manifest), record)


def _global_step(manifest: Manifest) -> int | None:
    position = manifest.components.data_position
    return position.global_step if position is not None else None


def _relative(record: LineageRecord, directory: Path) -> LineageRecord:
    if record.parent is None:
        return record
    relative = Path(os.path.relpath(record.parent.checkpoint, directory)).as_posix()
    return record.model_copy(update={"parent": record.parent.model_copy(update={"checkpoint": relative})})


_LEDGERS: weakref.WeakKeyDictionary[object, RunLedger] = weakref.WeakKeyDictionary()


def ledger_for(owner: object) -> RunLedger:
    """The ledger of the run `owner` (a model) is trained in, made at its first save or restore."""
    ledger = _LEDGERS.get(owner)
    if ledger is None:
        ledger = _LEDGERS[owner] = RunLedger()
    return ledger
