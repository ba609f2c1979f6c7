"""The non-tensor items of a torch.distributed.checkpoint save (an optimizer's `lr`, `betas`, any
object in the state dict) are pickles that `dcp.load` unpickles with torch.load: each is listed
with where it lies, and judged like any pickle, named by its slice."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from .._payloads import SystemCall
from ..hostile_containers.conftest import judge_all

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

_LOADS = """
import sys, warnings, torch
import torch.distributed.checkpoint as dcp
warnings.simplefilter("ignore")
state = {"model": torch.nn.Linear(3, 2).state_dict(), "extra": None}
dcp.load(state, checkpoint_id=sys.argv[1], no_dist=True)
"""


def _save(directory: Path, **extra: object) -> Path:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict(), **extra}, checkpoint_id=directory, no_dist=True)
    return directory


def _ckptspec(*arguments: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptspec", *map(str, arguments)], capture_output=True, text=True, timeout=120)


@pytest.fixture()
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    return _save(tmp_path / "save", extra=SystemCall(f"touch {marker}")), marker


def test_dcp_load_runs_the_pickle_of_a_non_tensor_item(hostile: tuple[Path, Path]) -> None:
    directory, marker = hostile
    subprocess.run([sys.executable, "-c", _LOADS, str(directory)], capture_output=True, timeout=120, check=False)

    assert marker.exists()


def test_the_item_is_judged_and_named_by_its_slice_within_the_memory_limit(hostile: tuple[Path, Path]) -> None:
    directory, marker = hostile
    verdicts = judge_all([directory])

    for command in ("audit", "validate"):
        verdict = verdicts[command, directory]
        assert verdict["code"] == 1, verdict
        findings = [f for result in json.loads(verdict["stdout"])["results"] for f in result["findings"]]
        dangers = [f for f in findings if f["code"] == "CKS401"]
        assert dangers and all("CKS009" != f["code"] for f in findings), findings
        assert dangers[0]["file"].endswith("__0_0.distcp!extra") and "posix.system" in dangers[0]["message"]
    inspection = json.loads(verdicts["inspect", directory]["stdout"])
    items = inspection["metadata"]["byte_items"]
    assert {"/optim/param_groups/0/lr", "/optim/param_groups/0/betas", "/extra"} <= items.keys()
    data_file = directory / "__0_0.distcp"
    assert all(at["file"] == "__0_0.distcp" and at["length"] > 0 and at["offset"] + at["length"] <= data_file.stat().st_size for at in items.values())
    dangerous = [g for g in inspection["globals"] if g["safety"] == "dangerous"]
    assert [(g["module"], g["name"]) for g in dangerous] == [("posix", "system")]
    assert not marker.exists()


def test_a_manifest_is_not_written_for_it(hostile: tuple[Path, Path]) -> None:
    directory, _marker = hostile
    outcome = _ckptspec("manifest", directory)

    assert outcome.returncode == 1 and "__0_0.distcp!extra: pickle names posix.system" in outcome.stderr, outcome.stderr
    assert not list(directory.parent.glob("*.ckptspec.yaml"))


def test_a_plain_optimizer_save_passes_with_its_hyper_parameters_read(tmp_path: Path) -> None:
    directory = _save(tmp_path / "save")
    assert _ckptspec("manifest", directory).returncode == 0

    outcome = _ckptspec("audit", "--format", "json", directory)

    assert outcome.returncode == 0, outcome.stdout
    inspected = json.loads(_ckptspec("inspect", "--format", "json", directory).stdout)
    assert not [g for g in inspected["globals"] if g["safety"] == "dangerous"]
    assert "/optim/param_groups/0/lr" in inspected["metadata"]["byte_items"]
