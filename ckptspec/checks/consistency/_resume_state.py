"""The state a resume continues from besides the optimizer (scheduler, gradient scaler, data position)
matches the manifest and the fit loop."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..._exceptions import ReaderError
from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, declare
from ..._views.base import MISSING, CheckpointView, TensorInfo
from ._stored import FIT_LOOP, decoded, lookup, scalar_mismatches, variable_pointer

if TYPE_CHECKING:
    from ..._models import DataPositionRecord, Manifest, SchedulerRecord

__all__ = [
    "DataPositionMismatch",
    "ScalerStateMismatch",
    "SchedulerBehindLoop",
    "SchedulerStateMismatch",
    "SchedulerStepMismatch",
    "check_data_position",
    "check_scaler",
    "check_scheduler",
]

_BATCH_IN_EPOCH = ("epoch_loop.batch_progress", "current", "completed")
_SCHEDULER_STEPS = ("epoch_loop.scheduler_progress", "total", "completed")
_SWA_SCHEDULER_KEYS = frozenset({"anneal_epochs", "_anneal_strategy"})
"""An SWALR's own state: Lightning's StochasticWeightAveraging swaps it in mid-run, with a count of its
own, so the loop's count of scheduler steps does not describe it."""


@declare("CKS310", "scheduler-step-mismatch", family="consistency", severity="error")
class SchedulerStepMismatch:
    """## What it does
    Checks that each scheduler's step in the file (`last_epoch`, or a TensorFlow optimizer's
    `iterations`) equals the step the manifest records.

    ## Why is this bad?
    The learning rate after a resume is computed from this step; another step means another point of
    the schedule.

    ## Example
    The manifest records `step: 500`, the file's `lr_schedulers[0].last_epoch` is `0`.

    ## How to fix
    Save the scheduler's state together with the optimizer's, at the same step.
    """


@declare("CKS311", "scheduler-state-mismatch", family="consistency", severity="error")
class SchedulerStateMismatch:
    """## What it does
    Checks each scalar of the scheduler state the manifest records (base_lrs, T_max, gamma, ...)
    against the file.

    ## Why is this bad?
    `scheduler.load_state_dict` overwrites the configured schedule with the saved one; a difference
    from the manifest means the schedule was edited after the fact.

    ## Example
    The manifest records `T_max: 1000`, the file holds `T_max: 100`.

    ## How to fix
    Find which of the two was edited; write the manifest again from the run that saved the file.
    """


@declare("CKS312", "scheduler-behind-loop", family="consistency", severity="warning")
class SchedulerBehindLoop:
    """## What it does
    Checks that a Lightning checkpoint's single scheduler has stepped as often as its fit loop's
    `scheduler_progress` says it did. An SWALR that `StochasticWeightAveraging` swapped in mid-run
    counts its own steps from then on and is not compared.

    ## Why is this bad?
    A scheduler restored from another run, or stepped outside Lightning, is at another point of its
    schedule than the training loop; the learning rate after a resume is off.

    ## Example
    `lr_schedulers[0].last_epoch: 0` while `epoch_loop.scheduler_progress.total.completed: 500`.

    ## How to fix
    Let Lightning step the scheduler (return it from `configure_optimizers`), or save its state with
    the checkpoint.
    """


@declare("CKS313", "scaler-state-mismatch", family="consistency", severity="error")
class ScalerStateMismatch:
    """## What it does
    Checks the gradient scaler's `scale` and growth tracker in the file against the manifest.

    ## Why is this bad?
    A fresh scale (65536) after a resume causes a burst of skipped steps from overflow, and hides a
    scaler that was never saved.

    ## Example
    The manifest records `scale: 1024.0`, the file's `MixedPrecision.scale` is `65536.0`.

    ## How to fix
    Save the scaler state with the checkpoint (Lightning does so for `16-mixed` precision).
    """


@declare("CKS314", "data-position-mismatch", family="consistency", severity="error")
class DataPositionMismatch:
    """## What it does
    Checks the data position the manifest records (epoch, global step, batch in epoch) against the
    values the checkpoint itself holds. In a TensorFlow bundle these are the `epoch` and `step`
    variables `ckptspec.tensorflow.CheckpointManager` saves, the step being the optimizer's
    `iterations` where no `step` of its own is saved (or where the manifest's `at` names them).

    ## Why is this bad?
    A resume positions the data from the file; a manifest that says otherwise describes another
    save, and the promise of a reproducible resume is void.

    ## Example
    The manifest records `global_step: 900`, the Lightning file holds `global_step: 450`.

    ## How to fix
    Make sure manifest and checkpoint belong to the same save.
    """


def check_scheduler(
    ctx: Context, view: CheckpointView, record: SchedulerRecord, where: tuple[str | int, ...], *, alone: bool
) -> Iterator[Finding]:
    stored = view.resolve(record.at)
    try:
        step = _stored_step(view, record, stored)
    except ReaderError as exc:
        yield ctx.not_checked(SchedulerStepMismatch, str(exc), file=view.path, pointer=record.at, path=(*where, "step"))
        step = MISSING
    if step is not MISSING and step != record.step:
        yield ctx.finding(
            SchedulerStepMismatch,
            f"{record.at}: step {step} in the file, {record.step} recorded",
            file=view.path,
            pointer=record.at,
            path=(*where, "step"),
        )
    if isinstance(stored, Mapping):
        yield from scalar_mismatches(ctx, SchedulerStateMismatch, view, record.state, stored, at=record.at, path=(*where, "state"))
        if alone and view.format == "lightning" and not _SWA_SCHEDULER_KEYS <= stored.keys():
            yield from _scheduler_against_loop(ctx, view, record, step)


def _stored_step(view: CheckpointView, record: SchedulerRecord, stored: Any) -> Any:
    if isinstance(stored, Mapping):
        return stored.get("last_epoch", MISSING)
    tensor = view.tensors.get(record.at)
    if tensor is not None and tensor.read_scalar is not None:
        return tensor.scalar()
    return MISSING


def _scheduler_against_loop(ctx: Context, view: CheckpointView, record: SchedulerRecord, step: Any) -> Iterator[Finding]:
    loop_steps = lookup(view.resolve(FIT_LOOP), *_SCHEDULER_STEPS)
    if isinstance(loop_steps, int) and isinstance(step, int) and step != loop_steps:
        yield ctx.finding(
            SchedulerBehindLoop,
            f"{record.at}/last_epoch is {step}, but the fit loop stepped its scheduler {loop_steps} times",
            file=view.path,
            pointer=f"{record.at}/last_epoch",
        )


def check_scaler(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    record = manifest.components.scaler
    if record is None:
        return
    stored = view.resolve(record.at)
    for key, recorded, field in (("scale", record.scale, "scale"), ("_growth_tracker", record.growth_tracker, "growth_tracker")):
        value = lookup(stored, key)
        if isinstance(value, (int, float)) and value != recorded:
            yield ctx.finding(
                ScalerStateMismatch,
                f"{record.at}/{key}: {value!r} in the file, {recorded!r} recorded",
                file=view.path,
                pointer=f"{record.at}/{key}",
                path=("components", "scaler", field),
            )


def check_data_position(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    """The data position against the file, and each rank's own where several processes saved it."""
    record = manifest.components.data_position
    if record is not None and view.format == "tf-bundle":
        yield from _tf_data_position(ctx, view, record)
    elif record is not None:
        yield from _position_mismatches(ctx, view, record, _stored_position(view, record.at), ("components", "data_position"))
    ranks = manifest.components.ranks
    for index, state in enumerate(ranks.states if ranks is not None else []):
        if state.data_position is not None:
            stored = _saved_position(view, state.data_position.at)
            where = ("components", "ranks", "states", index, "data_position")
            yield from _position_mismatches(ctx, view, state.data_position, stored, where, f"rank {state.rank}: ")


def _position_mismatches(
    ctx: Context,
    view: CheckpointView,
    record: DataPositionRecord,
    stored_fields: Iterator[tuple[str, str, Any]],
    where: tuple[str | int, ...],
    whose: str = "",
) -> Iterator[Finding]:
    for field, pointer, stored in stored_fields:
        recorded = getattr(record, field)
        if recorded is not None and isinstance(stored, int) and stored != recorded:
            yield ctx.finding(
                DataPositionMismatch,
                f"{whose}{pointer}: {field} is {stored} in the file, {recorded} recorded",
                file=view.path,
                pointer=pointer,
                path=(*where, field),
            )


def _stored_position(view: CheckpointView, at: str | None) -> Iterator[tuple[str, str, Any]]:
    if view.format == "lightning":
        yield "epoch", "/epoch", view.resolve("/epoch")
        yield "global_step", "/global_step", view.resolve("/global_step")
        pointer = FIT_LOOP + join_pointer(_BATCH_IN_EPOCH)
        yield "batch_in_epoch", pointer, lookup(view.resolve(FIT_LOOP), *_BATCH_IN_EPOCH)
        return
    yield from _saved_position(view, at)


def _saved_position(view: CheckpointView, at: str | None) -> Iterator[tuple[str, str, Any]]:
    """The position fields saved as a mapping at `at` (by an adapter, beside the training state)."""
    stored = view.resolve(at) if at is not None else MISSING
    if isinstance(stored, Mapping):
        for field in ("epoch", "global_step", "batch_in_epoch", "samples_seen", "sampler_seed"):
            yield field, f"{at}/{field}", stored.get(field, MISSING)


def _tf_data_position(ctx: Context, view: CheckpointView, record: DataPositionRecord) -> Iterator[Finding]:
    for field, tensor in _tf_counters(view, record.at).items():
        recorded = getattr(record, field)
        if recorded is None:
            continue
        path = ("components", "data_position", field)
        if tensor is None:
            reason = f"no tensor of the bundle is known to hold the {field}"
            if view.roles_unknown is not None:
                reason += f"; {view.roles_unknown}"
            yield ctx.not_checked(DataPositionMismatch, reason, file=view.path, pointer=record.at, path=path)
            continue
        stored = yield from decoded(ctx, DataPositionMismatch, view, tensor, path)
        if stored is not MISSING and stored != recorded:
            yield ctx.finding(
                DataPositionMismatch,
                f"{tensor.pointer}: {field} is {stored} in the file, {recorded} recorded",
                file=view.path,
                pointer=tensor.pointer,
                path=path,
            )


def _tf_counters(view: CheckpointView, at: str | None) -> dict[str, TensorInfo | None]:
    """The tensors holding the epoch and the global step. Only the bundle's names tell them: the
    manifest's `at` names the epoch, or the iterator, for `CheckpointManager`, and the optimizer's
    iterations for an adopted bundle."""
    named = view.tensors.get(at) if at is not None else None
    if named is not None and named.role == "optimizer_iterations":
        step: TensorInfo | None = named
    else:
        iterations = [tensor for tensor in view.tensors.values() if tensor.role == "optimizer_iterations"]
        step = view.tensors.get(variable_pointer("step")) or (iterations[0] if len(iterations) == 1 else None)
    return {"epoch": view.tensors.get(variable_pointer("epoch")), "global_step": step}
