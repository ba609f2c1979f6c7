"""An optimizer or scheduler built anew after `ckptspec.torch.restore` loads and trains without an
error; the first save after the restore names it and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import RestoreError  # noqa: E402


class _Run:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3)

    def train(self, steps: int) -> None:
        for _ in range(steps):
            self.optimizer.zero_grad()
            self.model(torch.randn(2, 4)).pow(2).mean().backward()
            self.optimizer.step()
            self.scheduler.step()

    def save(self, path: Path) -> None:
        ckpt.save(path, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)

    def restore(self, path: Path, **options: object) -> None:
        ckpt.restore(path, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler, **options)  # type: ignore[arg-type]


def _optimizer_rebuilt(run: _Run) -> None:
    run.optimizer = torch.optim.Adam(run.model.parameters(), lr=0.01)
    run.scheduler.optimizer = run.optimizer


def _scheduler_rebuilt(run: _Run) -> None:
    run.scheduler = torch.optim.lr_scheduler.StepLR(run.optimizer, step_size=3)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    run = _Run()
    run.train(6)
    run.save(tmp_path / "step-6.pt")
    return tmp_path / "step-6.pt"


@pytest.mark.parametrize(
    ("rebuild", "named"),
    [
        (_optimizer_rebuilt, "optimizer 0's step count is 2, below the 6 restored: it was built anew after the restore, and its moments started again from zero"),
        (_scheduler_rebuilt, "scheduler 0's step count is 2, below the 6 restored: it was built anew after the restore, and its schedule started again"),
    ],
    ids=["optimizer", "scheduler"],
)
def test_an_object_built_anew_after_the_restore_is_named_at_the_first_save(
    saved: Path, tmp_path: Path, rebuild: Callable[[_Run], None], named: str
) -> None:
    continued, broken = _Run(), _Run()
    continued.restore(saved)
    broken.restore(saved)
    rebuild(broken)
    continued.train(2)
    broken.train(2)
    # The bug is real: the run trains on without an error, from a state the saved run never had.
    assert broken.optimizer.state_dict()["state"][0]["step"] != continued.optimizer.state_dict()["state"][0]["step"] or (
        broken.scheduler.last_epoch != continued.scheduler.last_epoch
    )
    continued.save(tmp_path / "continued-8.pt")
    with pytest.raises(RestoreError) as raised:
        broken.save(tmp_path / "broken-8.pt")
    assert str(raised.value) == (
        f"{tmp_path / 'broken-8.pt'}: not saved: the run resumed from {saved} does not train with what was restored:\n  - {named}\n"
        "train with the objects passed to restore, or restore with fork=True to begin a new run"
    )
    assert not (tmp_path / "broken-8.pt").exists()
    broken.save(tmp_path / "broken-8.pt")  # named once: the run may go on, its lineage shows the break


def test_a_declared_fork_may_build_its_optimizer_and_schedule_anew(saved: Path, tmp_path: Path) -> None:
    run = _Run()
    run.restore(saved, fork=True)
    _optimizer_rebuilt(run)
    _scheduler_rebuilt(run)
    run.train(2)
    run.save(tmp_path / "fine-tune-2.pt")
    assert (tmp_path / "fine-tune-2.pt").is_file()
