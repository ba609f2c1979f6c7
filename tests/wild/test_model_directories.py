"""A model directory as hubs ship it (weights beside config files) is named the same way to every
command: `validate` already took the directory, `inspect` and `manifest` refused it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from .conftest import run_cli


def test_every_command_takes_the_directory(model_directory: Path, tmp_path: Path) -> None:
    directory = tmp_path / model_directory.name
    shutil.copytree(model_directory, directory)
    code, out, err = run_cli("inspect", "--format", "json", directory)
    assert code == 0, err
    assert (json.loads(out)["path"], json.loads(out)["format"]) == (str(directory / "model.safetensors"), "safetensors")
    code, _, err = run_cli("manifest", directory)
    assert code == 0 and err.startswith(f"wrote {directory / 'model.safetensors'}.ckptspec.yaml\n"), err
    code, out, _ = run_cli("validate", directory)
    assert code == 0 and out.splitlines()[-1].endswith("1 passed, 0 failed; 0 errors, 1 warnings"), out


def test_a_directory_of_two_checkpoints_is_still_named_one_by_one(model_directory: Path, tmp_path: Path) -> None:
    directory = tmp_path / model_directory.name
    shutil.copytree(model_directory, directory)
    torch.save({"w": torch.zeros(2)}, directory / "pytorch_model.bin")
    for command in ("inspect", "manifest", "validate"):
        code, _, err = run_cli(command, directory)
        assert code == 2 and "a directory, not one checkpoint" in err, (command, err)


def test_audit_counts_the_weights_as_the_one_checkpoint_and_lists_the_config_files(model_directory: Path) -> None:
    code, out, _ = run_cli("audit", "--format", "json", model_directory)
    report = json.loads(out)
    assert report["summary"]["checkpoints"] == 1 and report["summary"]["not_checkpoints"] == 2
    listed = {Path(result["checkpoint"]).name: [finding["code"] for finding in result["findings"]] for result in report["results"]}
    assert listed["config.json"] == listed["generation_config.json"] == ["CKS015"]
    code, out, _ = run_cli("audit", model_directory)
    assert out.splitlines()[-1].startswith("1 checkpoint: ") and out.splitlines()[-1].endswith("; 2 other files listed")
