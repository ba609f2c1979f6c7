"""Lightning's loop counters agree with each other and with the checkpoint's epoch and global step."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, declare
from ..._views.base import CheckpointView

__all__ = ["EpochProgressMismatch", "GlobalStepMismatch", "ProgressCounterInverted", "check_lightning_counters"]

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
    progress = view.fit_progress()
    if progress is None:
        return
    epoch, progress_epoch = view.resolve("/epoch"), progress.epoch
    if isinstance(epoch, int) and progress_epoch is not None and epoch != progress_epoch:
        yield ctx.finding(
            EpochProgressMismatch,
            f"epoch is {epoch}, but loops.fit_loop.epoch_progress.current.completed is {progress_epoch}",
            file=view.path,
            pointer="/epoch",
        )
    step, loop_steps = view.resolve("/global_step"), progress.global_step
    if isinstance(step, int) and loop_steps is not None and step != loop_steps:
        yield ctx.finding(
            GlobalStepMismatch,
            f"global_step is {step}, but the fit loop recorded {loop_steps} optimizer steps ({progress.global_step_counter})",
            file=view.path,
            pointer="/global_step",
        )
    yield from _trackers(ctx, view, view.resolve("/loops"), "/loops")


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
