"""A Trainer run with the callback, preempted after eight steps and resumed to twelve: the manifests
record one run with its resume, `ckptspec lineage` passes it, and a resume from an older
checkpoint while a newer one exists is named as a rollback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from ckptspec import load_manifest  # noqa: E402
from ckptspec.lineage import judge_run  # noqa: E402
from ckptspec.transformers import CkptspecCallback  # noqa: E402

from ._tiny import trainer  # noqa: E402


class _Preempted(TrainerCallback):  # type: ignore[misc]
    """Stops training once the step `at` is saved, as a preemption ends a job."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.at:
            control.should_training_stop = True


def _train(output: Path, *, stop_at: int | None = None, resume: str | bool | None = None, fork: bool = False) -> None:
    callbacks = [CkptspecCallback(fork=fork), *([_Preempted(stop_at)] if stop_at is not None else [])]
    trainer(output, callbacks=callbacks).train(resume_from_checkpoint=resume)


def _errors(output: Path) -> set[tuple[str, str]]:
    report = judge_run([output]).report
    return {(finding.code, Path(finding.checkpoint).name) for finding in report.findings if finding.severity == "error"}


def _only_the_unchecked_data_order(findings: list) -> None:  # type: ignore[type-arg]
    """The run stopped right after saving checkpoint-8: no batch drawn after it was recorded."""
    (unproven,) = findings
    assert (unproven.code, unproven.severity, Path(unproven.checkpoint).name) == ("CKS514", "info", "checkpoint-12")
    assert "the resume was measured (config, model, optimizer, rng, scheduler), not its data order" in unproven.message


def test_a_preempted_run_resumed_from_its_last_checkpoint_is_one_run(tmp_path: Path) -> None:
    output = tmp_path / "run"
    _train(output, stop_at=8)
    _train(output, resume=True)
    judgement = judge_run([output])
    _only_the_unchecked_data_order(judgement.report.findings)
    assert {facts.checkpoint.name for facts in judgement.graph.checkpoints} == {"checkpoint-4", "checkpoint-8", "checkpoint-12"}
    assert len({facts.run for facts in judgement.graph.checkpoints}) == 1
    (resumed,) = [found for found in judgement.graph.links if found.resumed]
    assert (resumed.parent.checkpoint.name, resumed.child.checkpoint.name) == ("checkpoint-8", "checkpoint-12")


def test_a_resume_from_an_older_checkpoint_while_a_newer_one_exists_is_a_rollback(tmp_path: Path) -> None:
    output = tmp_path / "run"
    _train(output)  # checkpoint-4, -8 and -12
    _train(output, stop_at=8, resume=str(output / "checkpoint-4"))  # writes checkpoint-8 again
    assert _errors(output) == {("CKS504", "checkpoint-8")}


def test_a_declared_fork_begins_a_run_of_its_own(tmp_path: Path) -> None:
    output = tmp_path / "run"
    _train(output, stop_at=8)
    _train(output, resume=True, fork=True)
    judgement = judge_run([output])
    _only_the_unchecked_data_order(judgement.report.findings)
    runs = {facts.checkpoint.name: facts.run for facts in judgement.graph.checkpoints}
    assert runs["checkpoint-4"] == runs["checkpoint-8"] != runs["checkpoint-12"]


def test_checkpoints_the_trainer_rotated_away_leave_a_chain_shown_from_the_first_one_kept(tmp_path: Path) -> None:
    """`save_total_limit` removes a run's first checkpoints, so the earliest one kept names a
    parent that is gone: no error, a note where the chain begins. A checkpoint deleted between two
    that are kept is a hole, an error."""
    output = tmp_path / "run"
    trainer(output, callbacks=[CkptspecCallback()], save_total_limit=2).train()
    assert sorted(path.name for path in output.iterdir()) == ["checkpoint-12", "checkpoint-8"]
    findings = judge_run([output]).report.findings
    assert [(finding.code, finding.severity, Path(finding.checkpoint).name) for finding in findings] == [("CKS501", "info", "checkpoint-8")]

    full = tmp_path / "full"
    _train(full)  # checkpoint-4, -8 and -12
    for file in sorted((full / "checkpoint-8").iterdir(), reverse=True):
        file.unlink()
    (full / "checkpoint-8").rmdir()
    assert _errors(full) == {("CKS501", "checkpoint-12")}


def test_a_resume_whose_first_batches_were_the_runs_is_recorded_as_proven(tmp_path: Path) -> None:
    output = tmp_path / "run"
    _train(output)  # checkpoint-4, -8 and -12, and the batches drawn after the first two
    resumed = tmp_path / "resumed"
    shutil.copytree(output / "checkpoint-4", resumed / "checkpoint-4")
    _train(resumed, stop_at=8, resume=str(resumed / "checkpoint-4"))
    manifest = load_manifest(resumed / "checkpoint-8" / ".ckptspec.yaml")
    assert manifest.lineage is not None and manifest.lineage.parent is not None
    assert manifest.lineage.parent.attested == ["config", "data_order", "model", "optimizer", "rng", "scheduler"]
    assert judge_run([resumed]).report.findings == []


def _kept_best_run(output: Path, *, limit: int, steps: int) -> None:
    """A run whose first evaluation is its best: the Trainer keeps checkpoint-4 for it besides the
    newest `limit - 1`, and removes those between."""
    import itertools

    from transformers import Trainer

    from ._tiny import Tokens, arguments, model

    scores = itertools.chain([1.0], itertools.repeat(0.0))
    Trainer(
        model=model(),
        args=arguments(output, save_total_limit=limit, max_steps=steps, eval_strategy="steps", eval_steps=4,
                       load_best_model_at_end=True, metric_for_best_model="chosen", greater_is_better=True),  # fmt: skip
        train_dataset=Tokens(),
        eval_dataset=Tokens(8),
        callbacks=[CkptspecCallback()],
        compute_metrics=lambda _prediction: {"chosen": next(scores)},
    ).train()


def test_checkpoints_removed_between_the_best_and_the_newest_are_no_hole(tmp_path: Path) -> None:
    """With `load_best_model_at_end`, the Trainer keeps the best checkpoint however old: the ones
    after it that it removed leave the newest naming a parent that is gone while an earlier
    checkpoint of the run is there. The manifests record the Trainer's retention, so that is a
    note, not a hole."""
    output = tmp_path / "run"
    _kept_best_run(output, limit=2, steps=16)
    assert sorted(path.name for path in output.iterdir()) == ["checkpoint-16", "checkpoint-4"]
    manifest = load_manifest(output / "checkpoint-16" / ".ckptspec.yaml")
    assert manifest.lineage is not None and manifest.lineage.retention is not None
    assert manifest.lineage.retention.model_dump() == {"newest": 2, "best": 1, "metric": "chosen"}
    assert manifest.lineage.parent is not None and not (output / "checkpoint-16" / manifest.lineage.parent.checkpoint).exists()

    findings = judge_run([output]).report.findings
    assert [(finding.code, finding.severity, Path(finding.checkpoint).name) for finding in findings] == [("CKS501", "info", "checkpoint-16")]
    assert "keeps its best 1 by chosen and its newest 2" in findings[0].message


def test_a_checkpoint_removed_beyond_what_the_retention_keeps_is_still_a_hole(tmp_path: Path) -> None:
    output = tmp_path / "run"
    _kept_best_run(output, limit=4, steps=20)
    assert sorted(path.name for path in output.iterdir()) == ["checkpoint-12", "checkpoint-16", "checkpoint-20", "checkpoint-4"]
    findings = judge_run([output]).report.findings  # checkpoint-8 removed by the Trainer: checkpoint-12's parent
    assert [(finding.code, finding.severity, Path(finding.checkpoint).name) for finding in findings] == [("CKS501", "info", "checkpoint-12")]
    shutil.rmtree(output / "checkpoint-16")  # two checkpoints of the run before it: more than the one best kept
    assert _errors(output) == {("CKS501", "checkpoint-20")}
