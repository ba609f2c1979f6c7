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
KERAS_SAVE_STEPS = 800
"""About the steps of a Keras callback's save of a small `.keras` file (most of the epoch's)."""
SHARDED_KILLS = 14
"""Kills over the four sharded-directory saves of a Lightning round (the steps from the first one on)."""
SHARDED_SAVE_STEPS = 2300
"""About the steps of a round from its first sharded save on (four saves, about 570 steps each)."""
TF_KILLS = 12
"""Kills over a TensorFlow manager's whole save (most fall while TensorFlow writes the bundle)."""
TF_COMMIT_STEPS = range(1, 60, 3)
"""And kills spread over the steps from the state file's update on (about 50): its replacement,
then the removal of the bundle it replaced (its manifest set aside, its files, the record)."""


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
    # Temporary files and the pending record of a save killed before its new checkpoint took a name.
    left = {path.name for path in checkpoint.parent.iterdir() if path.name.startswith(".") or _pending_alone(path)}
    assert leftovers == left


def _pending_alone(path: Path) -> bool:
    suffix = ".ckptspec.pending.yaml"
    return path.name.endswith(suffix) and not path.with_name(path.name[: -len(suffix)]).exists()


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
def sharded_torch_child(tmp_path: Path) -> Iterator[Child]:
    child = Child("torch-sharded", tmp_path / "run")
    yield child
    child.close()


def test_a_sharded_save_killed_at_any_step_leaves_a_directory_with_its_manifest_that_resumes(sharded_torch_child: Child) -> None:
    """`save_sharded` into the same directory each round: DCP writes its files under the same
    names every time, so before the staging directory a kill while they were written left the
    previous save half overwritten."""
    checkpoint = sharded_torch_child.directory / "sharded"
    assert "steps" in sharded_torch_child.ask(op="save", round=1)
    steps = sharded_torch_child.ask(op="save", round=2)["steps"]
    seeded = random.Random(27)
    kept, outcomes = 2, set()
    kill_points = [{"kill_at": seeded.randint(1, steps)} for _ in range(KILLS // 2)]
    kill_points += [{"kill_after_commit": at} for at in range(1, LAST_STEPS + 1)]
    for round, kill in enumerate(kill_points, start=3):
        answer = sharded_torch_child.ask(op="save", round=round, **kill)
        assert answer == {"killed": True} or "steps" in answer and "error" not in answer, (kill, answer)
        _judged_whole(checkpoint)
        resumed = sharded_torch_child.ask(op="resume")
        assert resumed.get("round") in (kept, round), (kill, resumed)
        outcomes.add("new" if resumed["round"] == round else "previous")
        kept = int(resumed["round"])
    assert outcomes == {"new", "previous"}


@pytest.fixture(params=["lightning", "lightning-own-io"])
def lightning_child(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Child]:
    """Lightning's own writer, and a `CheckpointIO` of the program's own."""
    pytest.importorskip("pytorch_lightning")
    child = Child(request.param, tmp_path / "run")
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


@pytest.fixture
def sharded_child(tmp_path: Path) -> Iterator[Child]:
    pytest.importorskip("pytorch_lightning")
    child = Child("lightning-sharded", tmp_path / "run")
    yield child
    child.close()


def test_a_sharded_directory_save_killed_at_any_step_leaves_pairs_that_validate_and_a_last_directory_that_resumes(sharded_child: Child) -> None:
    """ModelParallelStrategy writes each checkpoint as a directory itself; the callback stages it
    beside the previous one and swaps the two with its manifest."""
    last = sharded_child.directory / "last.ckpt"
    assert "steps" in sharded_child.ask(op="save", round=1)
    assert "steps" in sharded_child.ask(op="save", round=2)
    assert last.is_dir()
    seeded = random.Random(27)
    kept = 2.0
    kill_points = [{"kill_in_save": seeded.randint(1, SHARDED_SAVE_STEPS)} for _ in range(SHARDED_KILLS)]
    kill_points += [{"kill_after_commit": at} for at in range(1, LAST_STEPS + 1, 2)]
    for round, kill in enumerate(kill_points, start=3):
        answer = sharded_child.ask(op="save", round=round, **kill)
        assert answer == {"killed": True} or "steps" in answer and "error" not in answer, (kill, answer)
        _judged_whole(last)
        resumed = sharded_child.ask(op="resume")
        # A round trains two epochs from last.ckpt and saves after each: it holds one of them, or the round before.
        assert resumed.get("round") in (kept, kept + 0.5, kept + 1), (kill, resumed)
        kept = resumed["round"]
    assert kept > 2.0


@pytest.fixture
def tensorflow_child(tmp_path: Path) -> Iterator[Child]:
    pytest.importorskip("tensorflow")
    child = Child("tensorflow", tmp_path / "run")
    yield child
    child.close()


def _bundle_of(name: str) -> str:
    """The prefix of the bundle a file of a TensorFlow directory belongs to (itself for any other file)."""
    for suffix in (".index", ".ckptspec.yaml", ".ckptspec.pending.yaml", ".ckptspec.sig"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name.partition(".data-")[0]


def _directory_judged_whole(directory: Path) -> None:
    """The latest bundle validates; `audit` passes, judges every other file as part of a bundle or
    lists it as a leftover, and no manifest lists a file that is gone."""
    from ckptspec.formats.tf_state import latest_checkpoint

    result = validate(latest_checkpoint(directory))
    assert result.passed, [finding.message for finding in result.errors]
    report = audit([directory])
    assert report.passed, [(finding.code, finding.message) for result in report.results for finding in result.errors]
    leftovers = {Path(finding.file or "").name for finding in report.findings if finding.code == "CKS022"}
    judged = {Path(result.checkpoint).name for result in report.results if not any(f.code == "CKS022" for f in result.findings)}
    unaccounted = [name for name in sorted(path.name for path in directory.iterdir()) if name != "checkpoint" and name not in leftovers and _bundle_of(name) not in judged]
    assert not unaccounted, (unaccounted, leftovers, judged)
    assert all(name.startswith(".") or name.endswith("_temp") or _bundle_of(name) not in judged for name in leftovers), leftovers


def test_a_tensorflow_manager_save_killed_at_any_step_leaves_a_latest_bundle_with_its_manifest_that_resumes(tensorflow_child: Child) -> None:
    directory = tensorflow_child.directory
    assert "steps" in tensorflow_child.ask(op="save", round=1)
    steps = tensorflow_child.ask(op="save", round=2)["steps"]
    seeded = random.Random(27)
    kept, outcomes = 2, set()
    kill_points = [{"kill_at": seeded.randint(1, steps)} for _ in range(TF_KILLS)]
    kill_points += [{"kill_after_commit": at} for at in TF_COMMIT_STEPS]
    for round, kill in enumerate(kill_points, start=3):
        answer = tensorflow_child.ask(op="save", round=round, **kill)
        assert answer == {"killed": True} or "steps" in answer and "error" not in answer, (kill, answer)
        _directory_judged_whole(directory)
        resumed = tensorflow_child.ask(op="resume")
        assert resumed.get("round") in (kept, round), (kill, resumed)
        outcomes.add("new" if resumed["round"] == round else "previous")
        kept = int(resumed["round"])
    assert outcomes == {"new", "previous"}  # the kills fell before and after the state file named the new bundle
    assert "steps" in tensorflow_child.ask(op="save", round=len(kill_points) + 3)
    report = audit([directory])
    assert not [finding for finding in report.findings if finding.code == "CKS022"], "the next save removes what the kills left"


@pytest.fixture
def keras_child(tmp_path: Path) -> Iterator[Child]:
    pytest.importorskip("keras")
    child = Child("keras", tmp_path / "run")
    yield child
    child.close()


def test_a_keras_checkpoint_save_killed_at_any_step_leaves_a_pair_that_validates_and_loads(keras_child: Child) -> None:
    checkpoint = keras_child.directory / "model.keras"
    assert "steps" in keras_child.ask(op="save", round=1)
    assert "steps" in keras_child.ask(op="save", round=2)
    seeded = random.Random(27)
    kept, outcomes = 2, set()
    kill_points = [{"kill_in_save": seeded.randint(1, KERAS_SAVE_STEPS)} for _ in range(KILLS // 2)]
    kill_points += [{"kill_after_commit": at} for at in range(1, LAST_STEPS + 1)]
    for round, kill in enumerate(kill_points, start=3):
        answer = keras_child.ask(op="save", round=round, **kill)
        assert answer == {"killed": True} or "steps" in answer and "error" not in answer, (kill, answer)
        _judged_whole(checkpoint)
        resumed = keras_child.ask(op="resume")
        assert resumed.get("round") in (kept, round), (kill, resumed)
        outcomes.add("new" if resumed["round"] == round else "previous")
        kept = int(resumed["round"])
    assert outcomes == {"new", "previous"}
