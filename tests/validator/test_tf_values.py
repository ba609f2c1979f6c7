"""The counters and optimizer hyperparameters a TensorFlow bundle stores are compared value by value
with the manifest `ckptspec.tensorflow.CheckpointManager` wrote beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import HERE, copy_checkpoint, run_cli

SPEC = """\
ckptspec: "1.0"
kind: spec
name: keras-values
framework: tensorflow
components:
  scheduler: {require: optional}
  rng: {require: optional}
"""

EPOCH_KEY = "/epoch~1.ATTRIBUTES~1VARIABLE_VALUE"
ITERATIONS_KEY = "/optimizer~1_iterations~1.ATTRIBUTES~1VARIABLE_VALUE"
LEARNING_RATE_KEY = "/optimizer~1_learning_rate~1.ATTRIBUTES~1VARIABLE_VALUE"

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="session")
def manager_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The second save of a real `CheckpointManager` run (Adam at 1e-2, two steps, epoch 0)."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("tf-values")
    spec = out / "spec.yaml"
    spec.write_text(SPEC)
    subprocess.run([sys.executable, str(HERE / "_tf_adapter_training.py"), str(out / "run"), str(spec)], check=True, capture_output=True)
    return out / "run" / "ckpt-2"


@pytest.fixture
def edited(manager_checkpoint: Path, tmp_path: Path) -> Callable[[Edit], Path]:
    """A copy of the checkpoint whose manifest `edit` changed."""

    def edit_copy(edit: Edit) -> Path:
        prefix = copy_checkpoint(manager_checkpoint, tmp_path / "copy")
        manifest_path = Path(f"{prefix}.ckptspec.yaml")
        manifest = yaml.safe_load(manifest_path.read_text())
        edit(manifest)
        manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        return prefix

    return edit_copy


def _position(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["components"]["data_position"]


def _hyperparameters(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["components"]["optimizer"][0]["param_groups"][0]["hyperparameters"]


def _finding_lines(out: str, code: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith(code)]


def test_the_saved_manifest_records_what_the_bundle_holds(manager_checkpoint: Path) -> None:
    manifest = yaml.safe_load(Path(f"{manager_checkpoint}.ckptspec.yaml").read_text())
    assert (_position(manifest)["at"], _position(manifest)["epoch"], _position(manifest)["global_step"]) == (EPOCH_KEY, 0, 2)
    assert _hyperparameters(manifest)["learning_rate"] == pytest.approx(1e-2)
    code, out, _ = run_cli("validate", manager_checkpoint)
    assert code == 0, out


@pytest.mark.parametrize(
    ("field", "value", "key", "stored"),
    [("global_step", 5, ITERATIONS_KEY, 2), ("epoch", 3, EPOCH_KEY, 0)],
)
def test_another_data_position_in_the_manifest(edited: Callable[[Edit], Path], field: str, value: int, key: str, stored: int) -> None:
    prefix = edited(lambda manifest: _position(manifest).update({field: value}))
    code, out, _ = run_cli("validate", prefix)
    assert code == 1
    assert _finding_lines(out, "CKS") == [
        f"CKS314 [error] data-position-mismatch {key}: {field} is {stored} in the file, {value} recorded"
    ]


def test_another_learning_rate_in_the_manifest(edited: Callable[[Edit], Path]) -> None:
    prefix = edited(lambda manifest: _hyperparameters(manifest).update(learning_rate=0.02))
    code, out, _ = run_cli("validate", prefix)
    assert code == 1
    assert _finding_lines(out, "CKS") == [
        f"CKS304 [error] optimizer-hyperparameter-mismatch {LEARNING_RATE_KEY}: learning_rate 0.009999999776482582 in the file, 0.02 recorded"
    ]


def test_another_iteration_count_in_the_manifest(edited: Callable[[Edit], Path]) -> None:
    prefix = edited(lambda manifest: _hyperparameters(manifest).update(iterations=7))
    code, out, _ = run_cli("validate", prefix)
    assert code == 1
    assert _finding_lines(out, "CKS") == [
        f"CKS304 [error] optimizer-hyperparameter-mismatch {ITERATIONS_KEY}: iterations 2 in the file, 7 recorded"
    ]


def test_a_learning_rate_written_in_decimal_matches_its_float32(edited: Callable[[Edit], Path]) -> None:
    prefix = edited(lambda manifest: _hyperparameters(manifest).update(learning_rate=0.01, iterations=2))
    code, out, _ = run_cli("validate", prefix)
    assert code == 0, out


def test_counters_that_cannot_be_read_are_not_checked(manager_checkpoint: Path, tmp_path: Path) -> None:
    prefix = copy_checkpoint(manager_checkpoint, tmp_path)
    os.truncate(f"{prefix}.data-00000-of-00001", 0)
    code, out, _ = run_cli("validate", prefix)
    assert code == 1
    not_checked = [line for line in _finding_lines(out, "CKS010") if "CKS314 data-position-mismatch not checked" in line]
    assert [line.split(": ", 1)[0] for line in not_checked] == [f"CKS010 [error] could-not-check {EPOCH_KEY}"] * 2
    assert "epoch/.ATTRIBUTES/VARIABLE_VALUE: bytes 0..8 lie past the end of the file" in not_checked[0]
    assert "no tensor of the bundle is known to hold the global_step" in not_checked[1]
    assert not _finding_lines(out, "CKS314")
