"""A save that cannot finish raises `WriteError` naming the checkpoint and what is kept, and what
it says is kept is what the files hold: the previous pair validates, `audit` calls nothing broken,
and the resume gets the previous round back.

The faults are real: a disk that fills (a small tmpfs, mounted in the child's own mount namespace
where that is allowed) at every amount of free space from none to enough, so that it fills while
the checkpoint is written and while its manifest is; the file size limit (`RLIMIT_FSIZE`); an
immutable directory, checkpoint or manifest (`chattr +i`, where that is allowed)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._harness import Child, tmpfs_allowed

pytest.importorskip("torch")

ADAPTERS = ("torch", "tensorflow", "keras")
PAGE = 4096
FILE_SIZE_LIMIT = 128
"""Bytes a file may grow to under `RLIMIT_FSIZE`: fewer than any checkpoint file (a TensorFlow data shard included) holds."""
DISK = 8 << 20
"""The child's tmpfs: room for the pair and the runtime's own files, filled up for each save."""
KEPT = {
    "torch": "the previous checkpoint and its manifest are kept",
    "keras": "the previous checkpoint and its manifest are kept",
    "tensorflow": "the latest bundle ckpt-1 and its manifest are kept, and the state file names it",
}
"""What a failed save of round 2 over round 1 says it kept."""


def _skip_without(adapter: str) -> None:
    pytest.importorskip({"torch": "torch", "tensorflow": "tensorflow", "keras": "keras"}[adapter])


def _assert_kept(child: Child, adapter: str, answer: dict[str, object], kept: str | None = None) -> str:
    """The save failed with a `WriteError` saying the previous pair is kept (or `kept`), which is
    true; returns the step that failed."""
    error = str(answer.get("error", ""))
    match = re.fullmatch(r"WriteError: (\S+): not saved: (.+); (.+)", error)
    assert match is not None, answer
    assert match.group(3) == (kept or KEPT[adapter]), error
    checked = child.ask(op="check")
    assert checked["validate"] == [] and checked["audit"] == [], (error, checked)
    assert child.ask(op="resume") == {"round": 1.0}, error
    return match.group(2)


@pytest.fixture(params=ADAPTERS)
def on_small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Child]]:
    _skip_without(request.param)
    if not tmpfs_allowed(tmp_path / "probe"):
        pytest.skip("mounting a tmpfs in a mount namespace is not allowed here")
    child = Child(request.param, tmp_path / "disk" / "run", disk=DISK)
    yield request.param, child
    child.close()


def test_a_disk_that_fills_at_any_point_of_a_save_keeps_the_previous_pair_and_says_so(on_small_disk: tuple[str, Child]) -> None:
    adapter, child = on_small_disk
    assert "steps" in child.ask(op="save", round=1)
    failed_at = []
    for leave in range(0, DISK, PAGE):
        child.ask(op="fill", leave=leave)
        answer = child.ask(op="save", round=2)
        if "error" not in answer:
            child.ask(op="unfill")
            break
        failed_at.append(_assert_kept(child, adapter, answer))
        child.ask(op="unfill")
    else:
        pytest.fail("the save never fitted")
    assert child.ask(op="resume") == {"round": 2.0}
    assert not child.ask(op="check")["leftovers"]
    # The disk filled while the checkpoint was written, and (with its bytes written) at its manifest.
    assert any("manifest" not in step for step in failed_at), failed_at
    assert any("manifest" in step for step in failed_at), failed_at


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_file_size_limit_reached_while_the_checkpoint_is_written_keeps_the_previous_pair(adapter: str, tmp_path: Path) -> None:
    _skip_without(adapter)
    child = Child(adapter, tmp_path / "run")
    try:
        assert "steps" in child.ask(op="save", round=1)
        step = _assert_kept(child, adapter, child.ask(op="save", round=2, fsize=FILE_SIZE_LIMIT))
        assert "File too large" in step, step
    finally:
        child.close()


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[list[Path]]:
    """Paths made immutable by the test, made mutable again after it."""
    probe = tmp_path / "probe"
    probe.touch()
    try:
        _chattr("+i", probe)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("chattr +i is not allowed here")
    _chattr("-i", probe)
    made: list[Path] = []
    yield made
    for path in made:
        _chattr("-i", path)


def _files_of(adapter: str, directory: Path) -> dict[str, Path]:
    checkpoint = {"torch": "model.pt", "keras": "model.keras", "tensorflow": "ckpt-1.index"}[adapter]
    manifest = {"torch": "model.pt", "keras": "model.keras", "tensorflow": "ckpt-1"}[adapter] + ".ckptspec.yaml"
    return {"directory": directory, "checkpoint": directory / checkpoint, "manifest": directory / manifest}


@pytest.mark.parametrize("made_immutable", ["directory", "checkpoint", "manifest"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_immutable_directory_or_file_of_the_pair_is_a_write_error_that_keeps_the_previous_pair(
    adapter: str, made_immutable: str, tmp_path: Path, immutable: list[Path]
) -> None:
    _skip_without(adapter)
    child = Child(adapter, tmp_path / "run")
    try:
        assert "steps" in child.ask(op="save", round=1)
        target = _files_of(adapter, child.directory)[made_immutable]
        _chattr("+i", target)
        immutable.append(target)
        answer = child.ask(op="save", round=2)
        if adapter == "tensorflow" and made_immutable != "directory":
            # The new bundle does not replace ckpt-1: it is saved and named; only removing ckpt-1 fails, and the error says so.
            assert re.fullmatch(r"WriteError: \S+/ckpt-2: saved with its manifest, and the state file names it; but then: .+", str(answer.get("error"))), answer
            assert child.ask(op="resume") == {"round": 2.0}
            return
        _assert_kept(child, adapter, answer, "nothing was changed" if made_immutable == "directory" else None)
    finally:
        child.close()
