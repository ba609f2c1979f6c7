"""What a plain-torch `restore` put back, checked again at the model's first save after it.

torch has no hook between a restore and training, so an optimizer or scheduler built anew after
`restore` (its moments back to zero, its step counts fallen back) goes unseen until the training
code hands ckptspec the objects it trains with: at the next `save`. Their step counts only grow
while a run trains, so one below the count restored shows the object is not the one restored.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._exceptions import RestoreError

__all__ = ["check_first_save", "note_restored"]


@dataclass(frozen=True)
class _Restored:
    checkpoint: Path
    optimizer_steps: tuple[int | None, ...]
    scheduler_steps: tuple[int | None, ...]


_RESTORED: weakref.WeakKeyDictionary[torch.nn.Module, _Restored] = weakref.WeakKeyDictionary()


def note_restored(model: torch.nn.Module, checkpoint: Path, optimizers: Sequence[torch.optim.Optimizer], schedulers: Sequence[Any]) -> None:
    """Keep the step counts `restore` put into the optimizers and schedulers of `model`'s run."""
    _RESTORED[model] = _Restored(checkpoint, tuple(map(_optimizer_step, optimizers)), tuple(map(_scheduler_step, schedulers)))


def check_first_save(path: Path, model: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer], schedulers: Sequence[Any]) -> None:
    """At the first save of `model` after a restore: refuse the optimizers and schedulers whose
    step counts fell below the ones restored (`RestoreError`, nothing written)."""
    restored = _RESTORED.pop(model, None)
    if restored is None:
        return
    problems = [
        *_fallen("optimizer", restored.optimizer_steps, tuple(map(_optimizer_step, optimizers)), "its moments started again from zero"),
        *_fallen("scheduler", restored.scheduler_steps, tuple(map(_scheduler_step, schedulers)), "its schedule started again"),
    ]
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise RestoreError(
            f"{path}: not saved: the run resumed from {restored.checkpoint} does not train with what was restored:{listed}\n"
            "train with the objects passed to restore, or restore with fork=True to begin a new run"
        )


def _fallen(kind: str, restored: tuple[int | None, ...], live: tuple[int | None, ...], meaning: str) -> list[str]:
    problems = []
    for index, (before, now) in enumerate(zip(restored, live)):
        if before is not None and before > 0 and (now is None or now < before):
            counted = f"is {now}" if now is not None else "is not kept (it holds no state)"
            problems.append(f"{kind} {index}'s step count {counted}, below the {before} restored: it was built anew after the restore, and {meaning}")
    return problems


def _optimizer_step(optimizer: torch.optim.Optimizer) -> int | None:
    """The highest step count a parameter's state holds (Adam's `step`); None for an optimizer without one."""
    steps = [state["step"] for state in optimizer.state.values() if isinstance(state, dict) and "step" in state]
    return max((int(step.item() if isinstance(step, torch.Tensor) else step) for step in steps), default=None)


def _scheduler_step(scheduler: Any) -> int | None:
    step = getattr(scheduler, "last_epoch", None)
    return step if isinstance(step, int) and not isinstance(step, bool) else None
