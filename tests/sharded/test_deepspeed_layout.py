"""DeepSpeed's checkpoint layout, read without torch or DeepSpeed.

DeepSpeed does not install on this CPU-only machine (it builds CUDA ops), so the files are written
here by the same `torch.save` calls its engine makes for a ZeRO-2 save on 2 data-parallel ranks
(`DeepSpeedEngine._save_checkpoint`, `_save_zero_checkpoint`, then `latest` last, from rank 0), with
real model and AdamW state. Not exercised: the engine itself, and its config and loss-scaler
objects, which are plain values here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from ckptspec import validate
from ckptspec._validate import discover
from ckptspec.adopt import adopt
from ckptspec.checks._view import open_view
from ckptspec.formats.detect import inspect_checkpoint

from ._torchless import without_torch

TAG = "global_step4"
RANKS = 2
_DS_CONFIG = {"train_batch_size": 16, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}}


def _zero_state(flat: torch.Tensor, grad: torch.Tensor, rank: int) -> dict[str, object]:
    """One data-parallel rank's ZeRO-2 optimizer state: its partition of the flat fp32 weights and
    the AdamW state over it (`DeepSpeedZeroOptimizer.state_dict`)."""
    part = flat.numel() // RANKS
    partition = torch.nn.Parameter(flat[rank * part : (rank + 1) * part].clone())
    partition.grad = grad[rank * part : (rank + 1) * part].clone()
    optimizer = torch.optim.AdamW([partition], lr=1e-3)
    optimizer.step()
    return {
        "loss_scaler": None,
        "dynamic_loss_scale": False,
        "overflow": False,
        "clip_grad": 1.0,
        "base_optimizer_state": optimizer.state_dict(),
        "single_partition_of_fp32_groups": [partition.detach()],
        "zero_stage": 2,
        "group_paddings": [0],
        "partition_count": [RANKS],
        "ds_version": "0.19.8",
    }


@pytest.fixture(scope="session")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model(torch.randn(4, 8)).square().mean().backward()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    root = tmp_path_factory.mktemp("deepspeed") / "checkpoints"
    (root / TAG).mkdir(parents=True)
    model_states = {
        "module": model.state_dict(),
        "buffer_names": [],
        "optimizer": None,
        "param_shapes": [{name: p.shape for name, p in model.named_parameters()}],
        "frozen_param_shapes": None,
        "shared_params": {},
        "frozen_param_fragments": None,
        "lr_scheduler": None,
        "data_sampler": None,
        "random_ltd": None,
        "skipped_steps": 0,
        "global_steps": 4,
        "global_samples": 64,
        "dp_world_size": RANKS,
        "mp_world_size": 1,
        "ds_config": _DS_CONFIG,
        "ds_version": "0.19.8",
    }
    torch.save(model_states, root / TAG / "mp_rank_00_model_states.pt")
    for rank in range(RANKS):
        zero = {"optimizer_state_dict": _zero_state(flat, grad, rank), "ds_config": _DS_CONFIG, "ds_version": "0.19.8"}
        torch.save(zero, root / TAG / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    (root / "zero_to_fp32.py").write_text("# DeepSpeed copies its recovery script here\n")
    (root / "latest").write_text(TAG)
    return root


def _copy(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / source.name))


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(finding.message)
    return found


def test_inspect_follows_latest_to_every_rank_file(save_dir: Path) -> None:
    inspection = inspect_checkpoint(save_dir)
    assert inspection.format == "deepspeed" and inspection.metadata["tag"] == TAG
    assert inspection.metadata["rank_files"] == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    keys = {tensor.key for tensor in inspection.tensors}
    assert "/mp_rank_00_model_states/module/0.weight" in keys
    assert "/zero_pp_rank_1_mp_rank_00_optim_states/optimizer_state_dict/base_optimizer_state/state/0/exp_avg" in keys


def test_one_checkpoint_adopted_and_validated(save_dir: Path, tmp_path: Path) -> None:
    directory = _copy(save_dir, tmp_path)
    assert discover([tmp_path]).checkpoints == [directory]
    adopt(directory)
    with open_view(directory) as view:
        assert view.format == "deepspeed" and view.problems == []
    assert set(_codes(directory)) <= {"CKS004"}


def test_latest_naming_a_missing_tag(save_dir: Path, tmp_path: Path) -> None:
    directory = _copy(save_dir, tmp_path)
    shutil.rmtree(directory / TAG)
    found = _codes(directory)["CKS243"]
    assert any(TAG in message for message in found), found


def test_missing_zero_rank_file(save_dir: Path, tmp_path: Path) -> None:
    directory = _copy(save_dir, tmp_path)
    (directory / TAG / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    found = _codes(directory)["CKS244"]
    assert any("1 of 2" in message and "ranks 0" in message for message in found), found


def test_truncated_rank_file(save_dir: Path, tmp_path: Path) -> None:
    directory = _copy(save_dir, tmp_path)
    target = directory / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    target.write_bytes(target.read_bytes()[:-200])
    found = _codes(directory)["CKS211"]
    assert any("zero_pp_rank_1_mp_rank_00_optim_states.pt" in message for message in found), found


def test_read_without_torch(save_dir: Path, tmp_path: Path) -> None:
    directory = _copy(save_dir, tmp_path)
    assert without_torch("manifest", directory).returncode == 0
    validated = without_torch("validate", directory, "--format", "json")
    codes = {f["code"] for result in json.loads(validated.stdout)["results"] for f in result["findings"]}
    assert codes == {"CKS004"}, validated.stdout + validated.stderr
