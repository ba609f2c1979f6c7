"""A custom TensorFlow loop saved by the manager, interrupted after three saves and resumed: as it
should be, and as real scripts get it wrong. `ckptspec lineage` tells them apart from the files."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import keras
import pytest

from ckptspec.lineage import judge_run

from .tf_training import Run, make_run

STEPS_PER_SAVE = 2


def _train_and_save(run: Run, saves: int) -> None:
    for _ in range(saves):
        run.train(STEPS_PER_SAVE)
        run.manager.save()


@pytest.fixture(scope="module")
def first_half(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tf-first-half")
    _train_and_save(make_run(directory), 3)
    return directory


def _resumed(first_half: Path, target: Path, bug: Callable[[Run], None] | None = None, **restore: object) -> Run:
    shutil.copytree(first_half, target)
    run = make_run(target, seed=1)
    run.manager.restore(**restore)  # type: ignore[arg-type]
    if bug is not None:
        bug(run)
    _train_and_save(run, 2)
    return run


def _errors(directory: Path) -> set[tuple[str, str]]:
    report = judge_run([directory]).report
    return {(finding.code, Path(finding.checkpoint).name) for finding in report.findings if finding.severity == "error"}


def _seeded_after_restore(run: Run) -> None:
    keras.utils.set_random_seed(0)  # what the script does at its start, now after the restore


def _optimizer_counter_reset(run: Run) -> None:
    run.optimizer.iterations.assign(0)  # a warm-up restarted by hand; the manager's step is this counter


def _only_the_unchecked_data_order(findings: list) -> None:  # type: ignore[type-arg]
    """The manager measures the restore and digests no batch: the resume is proven but its data order."""
    (unproven,) = findings
    assert (unproven.code, unproven.severity, Path(unproven.checkpoint).name) == ("CKS514", "info", "ckpt-4")
    assert "the resume was measured (fingerprint, model, optimizer, rng), not its data order" in unproven.message


def test_a_resume_as_it_should_be_continues_the_run(first_half: Path, tmp_path: Path) -> None:
    _resumed(first_half, tmp_path / "run")
    judgement = judge_run([tmp_path / "run"])
    _only_the_unchecked_data_order(judgement.report.findings)
    runs = {facts.run for facts in judgement.graph.checkpoints}
    assert len(judgement.graph.checkpoints) == 5 and len(runs) == 1 and None not in runs
    resumed = next(found for found in judgement.graph.links if found.resumed)
    assert (resumed.parent.checkpoint.name, resumed.child.checkpoint.name) == ("ckpt-3", "ckpt-4")


@pytest.mark.parametrize(
    ("bug", "expected"),
    [
        (_seeded_after_restore, {("CKS510", "ckpt-4")}),
        (_optimizer_counter_reset, {("CKS505", "ckpt-4")}),
    ],
    ids=["seeded-after-restore", "optimizer-counter-reset"],
)
def test_each_resume_bug_is_named_at_the_bundle_where_it_happened(
    first_half: Path, tmp_path: Path, bug: Callable[[Run], None], expected: set[tuple[str, str]]
) -> None:
    continued = _resumed(first_half, tmp_path / "continued")
    broken = _resumed(first_half, tmp_path / "broken", bug)
    # The bug is real: the resumed run draws other augmentations, or counts its steps anew.
    assert [draw.tolist() for draw in continued.draws] != [draw.tolist() for draw in broken.draws] or int(continued.optimizer.iterations) != int(
        broken.optimizer.iterations
    )
    assert _errors(tmp_path / "continued") == set()
    assert _errors(tmp_path / "broken") == expected


def test_a_declared_fork_begins_a_run_of_its_own(first_half: Path, tmp_path: Path) -> None:
    _resumed(first_half, tmp_path / "run", fork=True)
    judgement = judge_run([tmp_path / "run"])
    _only_the_unchecked_data_order(judgement.report.findings)
    runs = {facts.checkpoint.name: facts.run for facts in judgement.graph.checkpoints}
    assert runs["ckpt-4"] == runs["ckpt-5"] != runs["ckpt-3"]
