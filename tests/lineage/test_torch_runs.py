"""Real plain-torch runs saved with `ckptspec.torch.save`, interrupted and resumed: once as they
should be, and once per resume bug as real training code makes it; `ckptspec lineage` names the
checkpoint where each run broke and the rule it broke."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import load_manifest, manifest_path_for  # noqa: E402
from ckptspec.cli import cli  # noqa: E402
from ckptspec.lineage import judge_run  # noqa: E402

SAVES_BEFORE = 3
STEPS_PER_SAVE = 2


class _Run:
    def __init__(self, *, scaled: bool = False) -> None:
        torch.manual_seed(0)  # the weights' initialisation
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3)
        self.scaler = torch.amp.GradScaler("cpu") if scaled else None
        self.position = ckpt.DataPosition()
        self.batch_size = 2
        self.accumulate = 1
        """Batches per optimizer step."""

    def train(self, saves: int, directory: Path, prefix: str = "step") -> None:
        for _ in range(saves):
            for _ in range(STEPS_PER_SAVE):
                self._learn(self.model(torch.randn(self.batch_size, 4)).pow(2).mean())
                self.scheduler.step()
                self.position.global_step += 1
                self.position.samples_seen += self.batch_size
            ckpt.save(
                directory / f"{prefix}-{self.position.global_step}.pt",
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                scaler=self.scaler,
                data_position=self.position,
            )

    def _learn(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        if (self.position.global_step + 1) % self.accumulate:
            return  # the gradients accumulate
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad()

    def restore(self, checkpoint: Path, **options: Any) -> None:
        ckpt.restore(
            checkpoint, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler, scaler=self.scaler, data_position=self.position, **options
        )


def _scheduler_built_after_restore(run: _Run) -> None:
    run.scheduler = torch.optim.lr_scheduler.StepLR(run.optimizer, step_size=3)


def _optimizer_rebuilt_after_restore(run: _Run) -> None:
    run.optimizer = torch.optim.Adam(run.model.parameters(), lr=0.01)
    run.scheduler.optimizer = run.optimizer


def _seeded_after_restore(run: _Run) -> None:
    torch.manual_seed(1)  # what the script does at the run's start, now after the restore


def _global_step_reset(run: _Run) -> None:
    run.position.global_step = 0


def _accumulating_after_restore(run: _Run) -> None:
    run.accumulate = 4  # the resumed script's gradient accumulation came from another configuration


def _batch_size_changed_on_restore(run: _Run) -> None:
    run.batch_size = 4  # the resumed script's loader was built with another batch size


def _scaler_built_after_restore(run: _Run) -> None:
    run.scaler = torch.amp.GradScaler("cpu")


@pytest.fixture(scope="session")
def first_half(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's first three saves, interrupted."""
    directory = tmp_path_factory.mktemp("first-half")
    run = _Run()
    torch.manual_seed(1)  # the run's data and dropout
    run.train(SAVES_BEFORE, directory)
    return directory


@pytest.fixture(scope="session")
def scaled_first_half(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`first_half`, its losses scaled by a gradient scaler saved with each checkpoint."""
    directory = tmp_path_factory.mktemp("scaled-first-half")
    run = _Run(scaled=True)
    torch.manual_seed(1)
    run.train(SAVES_BEFORE, directory)
    return directory


def _resumed(
    first_half: Path,
    target: Path,
    bug: Callable[[_Run], None] | None = None,
    *,
    start: str = "step-6.pt",
    saves: int = 2,
    prefix: str = "step",
    scaled: bool = False,
    after_saves: int = 0,
) -> _Run:
    """`first_half` resumed from `start` for `saves` saves, `bug` made after the first `after_saves` of them."""
    shutil.copytree(first_half, target)
    run = _Run(scaled=scaled)
    run.restore(target / start)
    run.train(after_saves, target, prefix)
    if bug is not None:
        bug(run)
    run.train(saves - after_saves, target, prefix)
    return run


MID_RUN = 1
"""`ckptspec.torch.save` refuses the first save after a restore with an optimizer or scheduler
built anew (tests/adapters_torch/test_first_save_after_restore.py): the rebuilds here happen one
save later, as in a script that builds its optimizer again when it unfreezes layers."""


def _codes(directory: Path) -> set[tuple[str, str]]:
    report = judge_run([directory]).report
    return {(finding.code, Path(finding.checkpoint).name) for finding in report.findings if finding.severity == "error"}


@pytest.fixture(scope="session")
def clean(first_half: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, _Run]:
    target = tmp_path_factory.mktemp("clean") / "run"
    return target, _resumed(first_half, target)


def test_a_run_resumed_as_it_should_be_has_no_finding(clean: tuple[Path, _Run]) -> None:
    directory, _ = clean
    result = CliRunner().invoke(cli, ["lineage", str(directory)])
    assert result.exit_code == 0, result.output
    assert "10 checkpoints" not in result.output and "5 checkpoints: 5 passed" in result.output


@pytest.mark.parametrize(
    ("bug", "rule", "broken_at", "diverges"),
    [
        (_scheduler_built_after_restore, "CKS507", "step-10.pt", "scheduler"),
        (_optimizer_rebuilt_after_restore, "CKS508", "step-10.pt", "optimizer"),
        (_seeded_after_restore, "CKS510", "step-8.pt", "model"),
    ],
    ids=["scheduler-not-restored", "optimizer-rebuilt", "seeded-after-restore"],
)
def test_each_resume_bug_is_named_at_the_checkpoint_where_it_happened(
    first_half: Path, clean: tuple[Path, _Run], tmp_path: Path, bug: Callable[[_Run], None], rule: str, broken_at: str, diverges: str
) -> None:
    broken = _resumed(first_half, tmp_path / "run", bug, after_saves=0 if bug is _seeded_after_restore else MID_RUN)
    # The bug is real: the resumed run is not the run continued.
    _, continued = clean
    assert _state_of(broken, diverges) != _state_of(continued, diverges)
    assert _codes(tmp_path / "run") == {(rule, broken_at)}
    result = CliRunner().invoke(cli, ["lineage", str(tmp_path / "run"), "--format", "json"])
    assert result.exit_code == 1 and rule in result.output


def _state_of(run: _Run, part: str) -> str:
    if part == "scheduler":
        return repr(run.scheduler.state_dict())
    if part == "optimizer":
        return repr([state["step"] for state in run.optimizer.state_dict()["state"].values()])
    if part == "position":
        return repr(run.position)
    return repr([tensor.tolist() for tensor in run.model.state_dict().values()])


@pytest.mark.parametrize(
    ("bug", "rule", "broken_at", "diverges"),
    [
        (_accumulating_after_restore, "CKS509", {"step-10.pt"}, "optimizer"),
        # Every save after the resume consumed twice the samples per step the run did before it.
        (_batch_size_changed_on_restore, "CKS511", {"step-8.pt", "step-10.pt"}, "position"),
    ],
    ids=["accumulation-changed", "batch-size-changed"],
)
def test_a_counter_that_advances_in_another_proportion_after_the_resume_is_caught(
    first_half: Path, clean: tuple[Path, _Run], tmp_path: Path, bug: Callable[[_Run], None], rule: str, broken_at: set[str], diverges: str
) -> None:
    broken = _resumed(first_half, tmp_path / "run", bug)
    _, continued = clean
    assert _state_of(broken, diverges) != _state_of(continued, diverges)
    assert _codes(tmp_path / "run") == {(rule, name) for name in broken_at}


def test_a_gradient_scaler_built_anew_after_the_restore_is_a_reset(scaled_first_half: Path, tmp_path: Path) -> None:
    continued = _resumed(scaled_first_half, tmp_path / "continued", scaled=True)
    broken = _resumed(scaled_first_half, tmp_path / "broken", _scaler_built_after_restore, scaled=True)
    assert broken.scaler is not None and continued.scaler is not None
    assert broken.scaler.state_dict() != continued.scaler.state_dict()  # the bug is real
    assert _codes(tmp_path / "continued") == set()
    assert _codes(tmp_path / "broken") == {("CKS512", "step-8.pt")}


def test_a_global_step_reset_after_restore_is_caught(first_half: Path, tmp_path: Path) -> None:
    _resumed(first_half, tmp_path / "run", _global_step_reset, prefix="again")
    assert ("CKS505", "again-2.pt") in _codes(tmp_path / "run")


def test_a_resume_from_an_older_checkpoint_is_a_rollback(first_half: Path, tmp_path: Path) -> None:
    # The resumed process writes step-4.pt again (the same bytes: CPU training is exact), while
    # step-6.pt, made from the first step-4.pt, is still there.
    before = (first_half / "step-4.pt").read_bytes()
    _resumed(first_half, tmp_path / "run", start="step-2.pt", saves=1)
    assert (tmp_path / "run" / "step-4.pt").read_bytes() == before
    assert _codes(tmp_path / "run") == {("CKS504", "step-4.pt")}


def test_two_jobs_resumed_from_the_newest_checkpoint_at_once_are_an_undeclared_fork_not_a_rollback(first_half: Path, tmp_path: Path) -> None:
    # A preempted job restarted twice: both resume from step-6.pt before either saves again.
    directory = tmp_path / "run"
    shutil.copytree(first_half, directory)
    first, second = _Run(), _Run()
    first.restore(directory / "step-6.pt")
    second.restore(directory / "step-6.pt")
    first.train(1, directory, "first")
    second.train(1, directory, "second")
    assert _codes(directory) == {("CKS503", "second-8.pt")}


def test_a_parent_replaced_by_another_runs_file_breaks_the_chain(first_half: Path, tmp_path: Path) -> None:
    directory = tmp_path / "run"
    shutil.copytree(first_half, directory)
    other = tmp_path / "other"
    other.mkdir()
    run = _Run()
    torch.manual_seed(7)
    run.train(2, other)
    for name in ("step-4.pt", "step-4.pt.ckptspec.yaml"):
        shutil.copy(other / name, directory / name)
    # step-6.pt's parent is not the one it was made from, and the intruder's own parent (the other
    # run's step-2.pt) is not the step-2.pt beside it.
    assert _codes(directory) == {("CKS502", "step-6.pt"), ("CKS502", "step-4.pt")}


def test_a_deleted_parent_is_missing(first_half: Path, tmp_path: Path) -> None:
    directory = tmp_path / "run"
    shutil.copytree(first_half, directory)
    for name in ("step-4.pt", "step-4.pt.ckptspec.yaml"):
        (directory / name).unlink()
    assert _codes(directory) == {("CKS501", "step-6.pt")}


def test_a_declared_fork_is_a_new_run(first_half: Path, tmp_path: Path) -> None:
    directory = tmp_path / "run"
    shutil.copytree(first_half, directory)
    run = _Run()
    run.restore(directory / "step-4.pt", fork=True)
    _scheduler_built_after_restore(run)  # a fine-tune may start its own schedule
    run.train(1, directory, "fine-tune")
    judgement = judge_run([directory])
    (unproven,) = judgement.report.findings  # restored without its loader: no batch was compared
    assert (unproven.code, unproven.severity, Path(unproven.checkpoint).name) == ("CKS514", "info", "fine-tune-6.pt")
    assert "the resume was measured (model, optimizer, scheduler), not its data order" in unproven.message
    runs = {facts.checkpoint.name: facts.run for facts in judgement.graph.checkpoints}
    assert runs["fine-tune-6.pt"] != runs["step-4.pt"] == runs["step-6.pt"]


def _plain_run(directory: Path, start: Path | None, bug: Callable[[_Run], None] | None, saves: int) -> None:
    """The same run saved by a training script's own `torch.save`, which ckptspec never sees."""
    run = _Run()
    if start is not None:
        saved = torch.load(start, weights_only=True)
        run.model.load_state_dict(saved["model"])
        run.optimizer.load_state_dict(saved["optimizer"])
        run.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
        run.position.global_step = saved["step"]
        if bug is not None:
            bug(run)
    else:
        torch.manual_seed(1)
    for _ in range(saves):
        for _ in range(STEPS_PER_SAVE):
            run._learn(run.model(torch.randn(2, 4)).pow(2).mean())
            run.scheduler.step()
            run.position.global_step += 1
        if bug is _global_step_reset and start is not None:
            run.position.global_step, bug = STEPS_PER_SAVE, None
        step = run.position.global_step
        state = {
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "step": step,
            "rng": torch.get_rng_state(),
        }
        torch.save(state, directory / f"{'later' if start is not None else 'step'}-{step}.pt")


@pytest.fixture(scope="session")
def plain_first_half(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("plain-first-half")
    _plain_run(directory, None, None, SAVES_BEFORE)
    return directory


@pytest.mark.parametrize(
    ("bug", "rule", "broken_at"),
    [
        (None, None, None),
        (_scheduler_built_after_restore, "CKS507", "later-8.pt"),
        (_optimizer_rebuilt_after_restore, "CKS508", "later-8.pt"),
        (_global_step_reset, "CKS505", "later-2.pt"),
        (_seeded_after_restore, "CKS510", "later-8.pt"),
        (_accumulating_after_restore, "CKS509", "later-10.pt"),
    ],
    ids=["clean", "scheduler-not-restored", "optimizer-rebuilt", "global-step-reset", "seeded-after-restore", "accumulation-changed"],
)
def test_the_same_bugs_are_caught_in_checkpoints_saved_without_ckptspec(
    plain_first_half: Path, tmp_path: Path, bug: Callable[[_Run], None] | None, rule: str | None, broken_at: str | None
) -> None:
    directory = tmp_path / "run"
    shutil.copytree(plain_first_half, directory)
    _plain_run(directory, directory / "step-6.pt", bug, 2)
    report = judge_run([directory]).report
    errors = {(finding.code, Path(finding.checkpoint).name) for finding in report.findings if finding.severity == "error"}
    assert errors == ({(rule, broken_at)} if rule is not None else set())
    assert {finding.code for finding in report.findings if finding.severity == "info"} == {"CKS513"}


def test_the_page_shows_the_run_and_marks_the_break_without_fetching_anything(first_half: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    _resumed(first_half, tmp_path / "run", _scheduler_built_after_restore, after_saves=MID_RUN)
    page = tmp_path / "run.html"
    result = CliRunner().invoke(cli, ["lineage", str(tmp_path / "run"), "--format", "html", "-o", str(page)])
    assert result.exit_code == 1, result.output
    html = page.read_text(encoding="utf-8")
    assert "<script src=" not in html and "Plotly.newPlot" in html  # plotly.js is inlined: nothing to fetch
    assert "5 checkpoints in 1 runs, 1 with breaks" in html
    assert "scheduler step against global step" in html and "learning rate against global step" in html
    assert html.count("CKS507 scheduler-out-of-step") >= 1 and "step-10.pt" in html


def test_the_page_renders_in_a_browser(first_half: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium here (apt-get install chromium); the page's structure is tested above")
    _resumed(first_half, tmp_path / "run", _scheduler_built_after_restore, after_saves=MID_RUN)
    page = tmp_path / "run.html"
    CliRunner().invoke(cli, ["lineage", str(tmp_path / "run"), "--format", "html", "-o", str(page)])
    rendered = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # plotly.js ran: it drew every subplot into SVG and wrote the title there.
    assert rendered.count('class="main-svg"') >= 1 and "with breaks" in rendered
    assert rendered.count("subplot xy") + rendered.count('class="subplot') >= 5


def test_audit_with_lineage_reports_the_break_beside_the_other_checks(first_half: Path, tmp_path: Path) -> None:
    _resumed(first_half, tmp_path / "run", _optimizer_rebuilt_after_restore, after_saves=MID_RUN)
    plain = CliRunner().invoke(cli, ["audit", str(tmp_path / "run"), "--format", "json"])
    judged = CliRunner().invoke(cli, ["audit", "--lineage", str(tmp_path / "run"), "--format", "json"])
    assert plain.exit_code == 0 and "CKS508" not in plain.output  # each file alone is sound
    assert judged.exit_code == 1 and '"code": "CKS508"' in judged.output


def test_a_run_id_read_from_the_manifests_is_shown_as_text_not_markup(first_half: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    directory = tmp_path / "run"
    shutil.copytree(first_half, directory)
    for manifest in directory.glob("*.ckptspec.yaml"):
        document = yaml.safe_load(manifest.read_text(encoding="utf-8"))
        document["lineage"]["run"] = "<b>r</b>&"
        manifest.write_text(yaml.safe_dump(document), encoding="utf-8")
    page = tmp_path / "run.html"
    result = CliRunner().invoke(cli, ["lineage", str(directory), "--format", "html", "-o", str(page)])
    assert page.is_file(), result.output  # the edits break the links to the parents' manifests: exit 1, the page written
    lanes = re.search(r'"ticktext":(\[[^\]]*\])', page.read_text(encoding="utf-8"))
    assert lanes is not None
    # plotly draws tick labels as its own markup, where <b> is bold and <a href> a link: the id is shown as typed.
    assert json.loads(lanes.group(1)) == ["&lt;b>r&lt;/b>&amp;"]


def test_weights_unchanged_at_a_later_step_are_a_child_and_the_same_save_again_a_copy(tmp_path: Path) -> None:
    """Saves with no optimizer step between them (a gradient accumulation longer than the save
    interval) hold the same weights at another global step: the second is the first's child. Only
    the same step saved again under another name (`last.pt`) is a copy. (Taking the child for a copy
    made the run's graph depend on whether the two saves fell in one second of `created`.)"""
    run = _Run()
    run.train(1, tmp_path)
    run.position.global_step += STEPS_PER_SAVE  # batches drawn, gradients accumulated, no optimizer step
    for name in ("step-4.pt", "last.pt"):
        ckpt.save(tmp_path / name, model=run.model, optimizer=run.optimizer, scheduler=run.scheduler, data_position=run.position)
    first, later, copy = (load_manifest(manifest_path_for(tmp_path / name)).lineage for name in ("step-2.pt", "step-4.pt", "last.pt"))
    assert later.parent is not None and later.parent.checkpoint == "step-2.pt" and later.sequence == first.sequence + 1
    assert copy == later
