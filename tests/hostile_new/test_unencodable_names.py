"""A tensor named by a lone surrogate (a pickle may hold one; no encoding writes it) is shown escaped in
every report, to the terminal and to a file, and refused by name where a manifest would have to hold it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NAME = "w\ud800x"


@pytest.fixture()
def named_by_a_surrogate(tmp_path: Path) -> tuple[Path, Path]:
    """A manifest of a checkpoint whose tensor is `wx`, beside a checkpoint whose tensor is `NAME`."""
    torch = pytest.importorskip("torch")
    checkpoint = tmp_path / "model.pt"
    torch.save({"state_dict": {"wx": torch.zeros(2)}}, checkpoint)
    assert _ckptspec("manifest", checkpoint).returncode == 0
    torch.save({"state_dict": {NAME: torch.zeros(2)}}, checkpoint)
    return checkpoint, tmp_path


def _ckptspec(*arguments: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ckptspec", *map(str, arguments)], capture_output=True, timeout=120)


@pytest.mark.parametrize("report", ["text", "markdown", "junit", "json", "sarif"])
def test_every_report_escapes_the_name(named_by_a_surrogate: tuple[Path, Path], report: str) -> None:
    checkpoint, directory = named_by_a_surrogate
    shown = _ckptspec("validate", "--format", report, checkpoint)
    written = _ckptspec("validate", "--format", report, "--output", directory / f"report.{report}", checkpoint)

    for outcome in (shown, written):
        assert outcome.returncode == 1, outcome.stderr
    for text in (shown.stdout, (directory / f"report.{report}").read_bytes()):
        assert "\\ud800" in text.decode("utf-8")


def test_inspect_lists_the_tensor_escaped(named_by_a_surrogate: tuple[Path, Path]) -> None:
    outcome = _ckptspec("inspect", "--tensors", named_by_a_surrogate[0])

    assert outcome.returncode == 0, outcome.stderr
    assert "/state_dict/w\\ud800x" in outcome.stdout.decode("utf-8")


def test_a_manifest_that_would_hold_the_name_is_refused_naming_it(named_by_a_surrogate: tuple[Path, Path]) -> None:
    checkpoint, _ = named_by_a_surrogate
    before = (checkpoint.parent / "model.pt.ckptspec.yaml").read_bytes()

    outcome = _ckptspec("manifest", "--force", checkpoint)

    assert outcome.returncode == 2
    message = outcome.stderr.decode("utf-8")
    assert "model.pt.ckptspec.yaml: not written: 'w\\ud800x' holds '\\ud800'" in message and "internal error" not in message
    assert (checkpoint.parent / "model.pt.ckptspec.yaml").read_bytes() == before
