"""Lightning's loop counters agree with each other and with the checkpoint's epoch and global step."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, declare
from .._view import CheckpointView
from ._stored import FIT_LOOP, lookup

__all__ = ["EpochProgressMismatch", "GlobalStepMismatch", "ProgressCounterInverted", "check_lightning_counters"]

_AUTOMATIC_STEPS = ("epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "total", "completed")
_MANUAL_STEPS = ("epoch_loop.manual_optimization.optim_step_progress", "total", "completed")
_EPOCHS = ("epoch_progress", "current", "completed")
_TRACKER_ORDER = ("ready", "started", "processed", "completed")


@declare("CKS301", "epoch-progress-mismatch", family="consistency", severity="error")
class EpochProgressMismatch:
    """## What it does
    Checks that a Lightning checkpoint's `epoch` equals its fit loop's
    `epoch_progress.current.completed`, the counter Lightning restores the epoch from.

    ## Why is this bad?
    The two disagree only when the checkpoint was edited or assembled from different saves; a resume
    then starts at another epoch than the file claims.

    ## Example
    `epoch: 3` while `loops.fit_loop.epoch_progress.current.completed: 2`.

    ## How to fix
    Use a checkpoint written by Lightning itself; do not edit the counters by hand.
    """


@declare("CKS302", "global-step-mismatch", family="consistency", severity="error")
class GlobalStepMismatch:
    """## What it does
    Checks that a Lightning checkpoint's `global_step` equals the optimizer steps its fit loop
    recorded (`optim_progress.optimizer.step.total.completed`, or the manual-optimization counter).

    ## Why is this bad?
    Lightning restores the global step from the loop counters, not from `global_step`: logging,
    `max_steps`, step-based schedules and `val_check_interval` silently shift.

    ## Example
    `global_step: 900` while the loop recorded 450 optimizer steps.

    ## How to fix
    Use a checkpoint written by Lightning itself; do not edit the counters by hand.
    """


@declare("CKS303", "progress-counter-inverted", family="consistency", severity="error")
class ProgressCounterInverted:
    """## What it does
    Checks every Lightning progress tracker in `loops` for the order Lightning's counters always keep:
    `ready >= started >= processed >= completed`.

    ## Why is this bad?
    Inverted counters cannot come from a real run; a resume derives batch and epoch positions from
    them and skips or repeats data.

    ## Example
    `epoch_loop.batch_progress.total: {ready: 8, completed: 9}`.

    ## How to fix
    Use a checkpoint written by Lightning itself.
    """


def check_lightning_counters(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    fit_loop = view.resolve(FIT_LOOP)
    if not isinstance(fit_loop, Mapping):
        return
    epoch, progress_epoch = view.resolve("/epoch"), lookup(fit_loop, *_EPOCHS)
    if isinstance(epoch, int) and isinstance(progress_epoch, int) and epoch != progress_epoch:
        yield ctx.finding(
            EpochProgressMismatch,
            f"epoch is {epoch}, but loops.fit_loop.epoch_progress.current.completed is {progress_epoch}",
            file=view.path,
            pointer="/epoch",
        )
    step, loop_steps, source = view.resolve("/global_step"), *_loop_steps(fit_loop)
    if isinstance(step, int) and isinstance(loop_steps, int) and step != loop_steps:
        yield ctx.finding(
            GlobalStepMismatch,
            f"global_step is {step}, but the fit loop recorded {loop_steps} optimizer steps ({source})",
            file=view.path,
            pointer="/global_step",
        )
    yield from _trackers(ctx, view, view.resolve("/loops"), "/loops")


def _loop_steps(fit_loop: Mapping[str, Any]) -> tuple[Any, str]:
    automatic, manual = lookup(fit_loop, *_AUTOMATIC_STEPS), lookup(fit_loop, *_MANUAL_STEPS)
    if isinstance(manual, int) and manual > 0 and not automatic:
        return manual, ".".join(_MANUAL_STEPS)
    return automatic, ".".join(_AUTOMATIC_STEPS)


def _trackers(ctx: Context, view: CheckpointView, node: Any, pointer: str) -> Iterator[Finding]:
    if not isinstance(node, Mapping):
        return
    counters = [(name, node[name]) for name in _TRACKER_ORDER if isinstance(node.get(name), int)]
    for (higher, high), (lower, low) in zip(counters, counters[1:]):
        if low > high:
            yield ctx.finding(
                ProgressCounterInverted,
                f"{pointer}: {lower}={low} exceeds {higher}={high}",
                file=view.path,
                pointer=pointer,
            )
    for key, child in node.items():
        yield from _trackers(ctx, view, child, pointer + join_pointer([str(key)]))
