"""`ckptspec diff`: what changed between two checkpoints or manifests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from .conftest import copy_checkpoint, run_cli

from ckptspec.diff import diff


def test_same_checkpoint_has_no_differences(lightning_checkpoint: Path) -> None:
    code, out, _ = run_cli("diff", lightning_checkpoint, lightning_checkpoint)
    assert (code, out.splitlines()[-1]) == (0, "no differences")


def test_changed_lr_tensor_and_scheduler_step(lightning_checkpoint: Path, tmp_path: Path) -> None:
    edited = copy_checkpoint(lightning_checkpoint, tmp_path)
    checkpoint = torch.load(edited, weights_only=False)
    checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] = 0.5
    checkpoint["lr_schedulers"][0]["last_epoch"] = 7
    checkpoint["state_dict"]["net.2.bias"] = checkpoint["state_dict"]["net.2.bias"] + 1
    del checkpoint["state_dict"]["net.1.num_batches_tracked"]
    torch.save(checkpoint, edited)
    changes = {(c.section, c.key, c.kind) for c in diff(lightning_checkpoint, edited).changes}
    assert changes == {
        ("optimizer", "[0].param_groups[0].lr", "changed"),
        ("scheduler", "[0].step", "changed"),
        ("tensors", "model:net.2.bias", "changed"),
        ("tensors", "model:net.1.num_batches_tracked", "removed"),
    }


def test_manifests_compare_config_constants_and_data_position(lightning_checkpoint: Path, tmp_path: Path) -> None:
    first = Path(f"{lightning_checkpoint}.ckptspec.yaml")
    second = tmp_path / "other.ckptspec.yaml"
    second.write_text(first.read_text().replace("  hidden: 4", "  hidden: 8").replace("epoch: 1\n", "epoch: 2\n"))
    code, out, _ = run_cli("diff", first, second, "--format", "json")
    document = json.loads(out)
    assert code == 1
    assert {(c["section"], c["key"], c["before"], c["after"]) for c in document["changes"]} == {
        ("config", "hyperparameters.hidden", 4, 8),
        ("data_position", "epoch", 1, 2),
    }


def test_tf_bundles_of_two_steps_differ_in_weights_and_iterations(tf_checkpoints: dict[str, Path]) -> None:
    difference = diff(tf_checkpoints["first"], tf_checkpoints["latest"])
    changed = {c.key for c in difference.changes if c.section == "tensors"}
    assert "model:optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in changed
    assert any(c.section == "data_position" and c.key == "global_step" and (c.before, c.after) == (1, 2) for c in difference.changes)
