"""The README's main job (`make demo`) must stay true: run it end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("tensorflow")


def test_demo_trains_validates_audits_and_catches_both_traps(repo: Path, tmp_path: Path) -> None:
    output = tmp_path / "demo-output"
    completed = subprocess.run(  # as `make demo` runs it: the output folder named relative to where it runs
        [sys.executable, str(repo / "examples" / "demo.py"), "demo-output"], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    summary = completed.stdout.split("== Summary")[1]
    assert summary.split() == [
        "yes", "resume", "passes", "yes", "eps", "trap", "caught", "yes", "checkpoints", "validate",
        "yes", "flipped", "byte", "caught", "yes", "audit", "clean", "yes", "intake", "passed,", "alias", "set",
    ]
    assert "eps is 0.001 in the model being restored, 1e-05 when saved" in completed.stdout
    assert "CKS207 [error] tensor-checksum-mismatch /state_dict/net.0.weight" in completed.stdout
    assert (output / "audit.sarif").is_file()
    assert "ckptspec.status = passed" in completed.stdout


def test_demo_refuses_a_directory_it_did_not_make(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    completed = subprocess.run(
        [sys.executable, str(repo / "examples" / "demo.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert completed.returncode == 1
    assert "exists and was not made by this demo" in completed.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
