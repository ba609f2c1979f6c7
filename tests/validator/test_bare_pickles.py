"""Bare pickles at intake: judged by the globals loading them would call, and never run."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

import ckptspec

from .._payloads import SystemCall
from .conftest import run_cli

torch = pytest.importorskip("torch")


@pytest.fixture
def intake(tmp_path: Path, torch_checkpoint: Path) -> dict[str, Path]:
    """An upload folder: a clean pickle, a malicious one, weights pickled with pickle.dump, a checkpoint."""
    folder = tmp_path / "incoming"
    folder.mkdir()
    (folder / "config.pkl").write_bytes(pickle.dumps({"lr": 0.1, "layers": [4, 8]}, protocol=4))
    marker = tmp_path / "payload-ran"
    (folder / "evil.pickle").write_bytes(pickle.dumps({"w": [1.0], "hook": SystemCall(f"touch {marker}")}))
    with (folder / "weights.pkl").open("wb") as handle:
        pickle.dump(torch.nn.Linear(2, 2).state_dict(), handle)
    for path in (torch_checkpoint, ckptspec.manifest_path_for(torch_checkpoint)):
        (folder / path.name).write_bytes(path.read_bytes())
    return {"folder": folder, "marker": marker}


def test_a_pickle_naming_only_plain_data_passes(intake: dict[str, Path]) -> None:
    result = ckptspec.validate(intake["folder"] / "config.pkl")
    assert (result.format, result.passed, result.findings, result.families) == ("pickle", True, [], ("safety",))


def test_a_malicious_pickle_is_found_not_run(intake: dict[str, Path]) -> None:
    code, out, _ = run_cli("validate", intake["folder"] / "evil.pickle")
    assert code == 1
    assert f"CKS401 [error] dangerous-pickle-global pickle names {os.system.__module__}.system (1×)" in out
    assert not intake["marker"].exists()


def test_weights_pickled_with_pickle_dump_would_run_torch_load(intake: dict[str, Path]) -> None:
    result = ckptspec.validate(intake["folder"] / "weights.pkl")
    assert [(f.code, f.message) for f in result.findings] == [
        ("CKS401", "pickle names torch.storage._load_from_bytes (1×), which is not on the allow-list: loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)")
    ]


def test_audit_judges_the_pickles_beside_the_checkpoints(intake: dict[str, Path], tmp_path: Path) -> None:
    report_path = tmp_path / "intake.json"
    code, _, _ = run_cli("audit", intake["folder"], "--format", "json", "-o", report_path)
    report = json.loads(report_path.read_text())
    verdicts = {Path(r["checkpoint"]).name: (r["format"], r["passed"]) for r in report["results"]}
    assert code == 1
    assert verdicts == {
        "config.pkl": ("pickle", True),
        "evil.pickle": ("pickle", False),
        "weights.pkl": ("pickle", False),
        intake_name(intake): ("torch", True),
    }
    assert not intake["marker"].exists()


def intake_name(intake: dict[str, Path]) -> str:
    [checkpoint] = [p.name for p in intake["folder"].iterdir() if p.suffix == ".pt"]
    return checkpoint
