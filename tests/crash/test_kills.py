"""A real save killed (SIGKILL) before a seeded step of its input and output, over the whole save:
after each kill the files hold a pair that validates, `audit` calls nothing broken, and the
adapter's resume gets back the previous round or the new one, never neither."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptspec import audit, validate

from ._harness import Child

pytest.importorskip("torch")

KILLS = 30
"""Kills at seeded steps of the whole save, most of which fall while the bytes are written."""
LAST_STEPS = 16
"""And one kill before each step from the commit of the pair on: the record, the swap, the rename, the lock."""


@pytest.fixture
def torch_child(tmp_path: Path) -> Iterator[Child]:
    child = Child("torch", tmp_path / "run")
    yield child
    child.close()


def _judged_whole(checkpoint: Path) -> None:
    result = validate(checkpoint)
    assert result.passed, [finding.message for finding in result.errors]
    report = audit([checkpoint.parent])
    assert report.passed, [(finding.code, finding.message) for result in report.results for finding in result.errors]
    leftovers = {Path(finding.file or "").name for finding in report.findings if finding.code == "CKS022"}
    assert leftovers == {path.name for path in checkpoint.parent.iterdir() if path.name.startswith(".")}


def test_a_torch_save_killed_at_any_step_leaves_a_pair_that_validates_and_resumes(torch_child: Child) -> None:
    checkpoint = torch_child.directory / "model.pt"
    assert "steps" in torch_child.ask(op="save", round=1)
    steps = torch_child.ask(op="save", round=2)["steps"]
    seeded = random.Random(27)
    kept, outcomes = 2, set()
    kill_points = [{"kill_at": seeded.randint(1, steps)} for _ in range(KILLS)]
    kill_points += [{"kill_after_commit": at} for at in range(1, LAST_STEPS + 1)]
    for round, kill in enumerate(kill_points, start=3):
        answer = torch_child.ask(op="save", round=round, **kill)
        # A kill point past the end of the save lets it finish.
        assert answer == {"killed": True} or "steps" in answer and "error" not in answer, (kill, answer)
        _judged_whole(checkpoint)
        resumed = torch_child.ask(op="resume")
        assert resumed.get("round") in (kept, round), (kill, resumed)
        outcomes.add("new" if resumed["round"] == round else "previous")
        kept = int(resumed["round"])
    assert outcomes == {"new", "previous"}  # the kills fell before and after the swap


@pytest.fixture
def lightning_child(tmp_path: Path) -> Iterator[Child]:
    pytest.importorskip("pytorch_lightning")
    child = Child("lightning", tmp_path / "run")
    yield child
    child.close()


def test_a_lightning_fit_killed_at_any_step_leaves_pairs_that_validate_and_a_last_ckpt_that_resumes(lightning_child: Child) -> None:
    last = lightning_child.directory / "last.ckpt"
    assert "steps" in lightning_child.ask(op="save", round=1)
    steps = lightning_child.ask(op="save", round=2)["steps"]
    seeded = random.Random(27)
    kept = 2.0
    for round in range(3, 3 + KILLS):
        at = seeded.randint(1, steps)
        assert lightning_child.ask(op="save", round=round, kill_at=at) in ({"killed": True}, {"steps": at - 1}), at
        _judged_whole(last)
        resumed = lightning_child.ask(op="resume")
        # Each round trains two epochs from last.ckpt and saves after each: it holds one of them, or the round before.
        assert resumed.get("round") in (kept, kept + 0.5, kept + 1), (at, resumed)
        kept = resumed["round"]
    assert kept > 2.0
