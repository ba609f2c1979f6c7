"""What a plain-torch `restore` put back, checked again where the loop goes on: before the loader
it was handed draws its first batch, over the first batches drawn, and at the model's first save.

torch has no hook between a restore and training, so an optimizer or scheduler built anew after
`restore` (its moments back to zero, its step counts fallen back) goes unseen until the training
code hands ckptspec the objects it trains with: at the next `save`. Their step counts only grow
while a run trains, so one below the count restored shows the object is not the one restored.
A generator re-seeded or drawn from after the restore, and optimizer state replaced after it,
show before the first batch; a sampler whose place was not restored shows in the batches
(`_next_batches`).
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import torch

from .._dataclass import dataclass
from .._sidecars import manifest_path_for
from .._exceptions import RestoreError
from .._models import DataPositionRule, Spec
from ._next_batches import BatchesDrawn, DataOrderCheck, data_order_check
from ._torch_enforce import raise_if_problems
from ._torch_loader import watch_loader
from ._torch_replay import generator_digests

__all__ = ["attest_at_first_batch", "check_first_save", "check_loader", "note_restored", "record_next_batches", "watch_resumed_loader"]


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


def check_loader(loader: Any, by: str) -> None:
    """`AdapterError` before anything is written or loaded when `loader` is no `DataLoader`."""
    if loader is not None:
        watch_loader(loader, by)


def record_next_batches(path: Path, loader: Any, spec: Spec | None) -> None:
    """After the save at `path`: digest the next batches `loader` gives the loop, and write them beside it."""
    wanted = (spec.components.data_position if spec is not None else DataPositionRule()).next_batches
    watch = watch_loader(loader, str(path))
    manifest_sha256 = hashlib.sha256(manifest_path_for(path).read_bytes()).hexdigest()
    watch.recorder.expect(BatchesDrawn(path, manifest_sha256, _rank(), watch.shape(loader), wanted))


def watch_resumed_loader(checkpoint: Path, manifest: Path, loader: Any, spec: Spec) -> DataOrderCheck | None:
    """Before anything is loaded: the check of the batches `loader` will draw after the resume from
    `checkpoint` (`RestoreError` now for a loader of another length); None where the spec lets the
    data change or turns the check off. `generators_restored` follows once the generators are back."""
    rule = spec.components.data_position
    watch = watch_loader(loader, str(checkpoint))
    watch.before_drawing = None
    watch.check = data_order_check(checkpoint, manifest, _rank(), watch.shape(loader)) if rule.on_resume == "restore" and rule.next_batches > 0 else None
    return watch.check


def attest_at_first_batch(
    checkpoint: Path,
    loader: Any,
    generators: Collection[str],
    training_state: Callable[[], list[str]],
    attested: Callable[[Sequence[str]], None],
) -> None:
    """Before `loader` draws again, once whatever the loop did after the restore has run: the
    training state measured against the saved one (`training_state()` lists what differs), and
    the generators as the restore left them; `attested(["rng"])` (or `[]` without generators)
    once both held."""
    restored = generator_digests(generators) if generators else {}
    watch_loader(loader, str(checkpoint)).before_drawing = functools.partial(_attest, checkpoint, restored, training_state, attested)


def _attest(checkpoint: Path, restored: dict[str, str], training_state: Callable[[], list[str]], attested: Callable[[Sequence[str]], None]) -> None:
    raise_if_problems(str(checkpoint), training_state())
    _generators_kept(checkpoint, restored)
    attested(["rng"] if restored else [])


def _generators_kept(checkpoint: Path, restored: dict[str, str]) -> None:
    changed = [name for name, digest in generator_digests(restored).items() if digest != restored[name]]
    if changed:
        raise RestoreError(
            f"{checkpoint}: rng: the state of the {', '.join(changed)} generator{'s' if len(changed) > 1 else ''} changed between "
            "the restore and the first batch (re-seeded, or drawn from): the resumed run does not draw what the run would have drawn"
        )


def _rank() -> int:
    distributed = torch.distributed
    return distributed.get_rank() if distributed.is_available() and distributed.is_initialized() else 0
