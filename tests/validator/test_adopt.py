"""`ckptspec manifest` (adoption) records only checkpoints it can vouch for, by the names they have
in their directory."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

import ckptspec.torch as ckpt
from ckptspec import RestoreError, load_manifest, validate
from ckptspec.torch import RestoreNote
from ckptspec.lightning import CkptspecCallback

from .._payloads import SystemCall
from .conftest import copy_checkpoint, run_cli

Copy = Callable[[Path], Path]


def _without_manifest(path: Path) -> Path:
    manifest = Path(f"{path}.ckptspec.yaml")
    manifest.unlink()
    return manifest


def test_a_checkpoint_linked_from_another_directory(torch_checkpoint: Path, tmp_path: Path, specs: dict[str, Path]) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    link = registry / "model.pt"
    link.symlink_to(torch_checkpoint)
    code, _, err = run_cli("manifest", link, "--spec", specs["torch"])
    assert (code, err) == (0, f"wrote {link}.ckptspec.yaml\n")
    assert [entry.path for entry in load_manifest(f"{link}.ckptspec.yaml").files] == ["model.pt"]
    assert {f.code for f in validate(link).findings} == {"CKS404"}
    code, out, _ = run_cli("diff", link, torch_checkpoint)
    assert (code, out.splitlines()[-1]) == (0, "no differences")


def test_truncated_shard_is_refused(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    manifest = _without_manifest(path)
    shard = Path(f"{path}.data-00000-of-00001")
    os.truncate(shard, 100)
    code, _, err = run_cli("manifest", path)
    assert code == 1 and not manifest.exists()
    lines = err.splitlines()
    assert lines[0] == f"error: {path}: not adopted, no manifest written:"
    assert lines[1].startswith(f"  CKS211 checkpoint-corrupt: {shard.name}: _CHECKPOINTABLE_OBJECT_GRAPH: ")
    assert all(line.startswith(f"  CKS211 checkpoint-corrupt: {shard.name}: ") for line in lines[1:])


def test_checksum_mismatch_and_missing_shard_are_refused(tf_checkpoints: dict[str, Path], copy_of: Copy, tmp_path: Path) -> None:
    flipped = copy_of(tf_checkpoints["latest"])
    _without_manifest(flipped)
    shard = Path(f"{flipped}.data-00000-of-00001")
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x10
    shard.write_bytes(data)
    code, _, err = run_cli("manifest", flipped)
    assert code == 1 and "\n  CKS209 stored-checksum-mismatch: " in err
    sharded = copy_checkpoint(tf_checkpoints["sharded"], tmp_path / "sharded")
    _without_manifest(sharded)
    Path(f"{sharded}.data-00001-of-00005").unlink()
    code, _, err = run_cli("manifest", sharded)
    assert code == 1 and "\n  CKS210 shard-missing: " in err and not Path(f"{sharded}.ckptspec.yaml").exists()


def test_dangerous_pickle_global_is_refused(torch_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    path = copy_of(torch_checkpoint)
    manifest = _without_manifest(path)
    checkpoint = torch.load(path, weights_only=False)
    torch.save({**checkpoint, "evil": SystemCall(f"touch {tmp_path / 'pwned'}")}, path)
    code, _, err = run_cli("manifest", path)
    assert (code, err) == (
        1,
        f"error: {path}: not adopted, no manifest written:\n"
        f"  CKS401 dangerous-pickle-global: pickle names {os.system.__module__}.system (1×), which is not on the allow-list: loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)\n",
    )
    assert not manifest.exists() and not (tmp_path / "pwned").exists()


def test_without_a_spec_validate_checks_what_the_manifest_records(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    code, _, err = run_cli("manifest", path, "--force")
    assert (code, err) == (
        0,
        f"wrote {path}.ckptspec.yaml\n"
        "note: the manifest embeds no spec; `ckptspec validate` checks what it records and warns (CKS004 spec-missing) "
        "that completeness against a declared policy is not checked until you pass --spec\n",
    )


def test_spec_help_says_what_adoption_does_with_it() -> None:
    _, out, _ = run_cli("manifest", "--help")
    assert "Embed this spec in the manifest" in out and "instead of the one embedded" not in out


class WildModule(pl.LightningModule):
    """Nested and OmegaConf hyper-parameters, and a frozen parameter the optimizer leaves out, as
    checkpoints from public packages have: adoption cannot name the optimizer's parameters."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters({"lr": lr, "net": {"hidden": 4, "dims": [3, 4], "norm": None}, "stages": OmegaConf.create([1, 2.5, "x"])})
        self.frozen = torch.nn.Parameter(torch.ones(3), requires_grad=False)
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features * self.frozen)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        features, targets = batch
        return torch.nn.functional.mse_loss(self(features), targets)

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)}

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(16, 3, generator=generator), torch.randn(16, 1, generator=generator)), batch_size=4)


ADOPTION_SPEC = """\
ckptspec: "1.0"
kind: spec
name: adopted
framework: lightning
components:
  config: {require: optional}
  rng: {require: optional}
  fingerprint: {require: optional}
"""


def _trainer(root: Path, epochs: int, *callbacks: pl.Callback, **options: object) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, callbacks=list(callbacks), **options,
    )  # fmt: skip


@pytest.fixture(scope="session")
def lightning_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A real Lightning checkpoint written without ckptspec, the same rewritten as Lightning 1.x wrote
    it, and the spec they are adopted under."""
    root = tmp_path_factory.mktemp("wild")
    torch.manual_seed(0)
    _trainer(root, 1).fit(WildModule())
    (written,) = (root / "checkpoints").glob("*.ckpt")
    state = torch.load(written, weights_only=False)
    state["pytorch-lightning_version"] = "1.5.4"
    state.pop("hparams_type", None)
    old = root / "pyannote-style.ckpt"
    torch.save(state, old)
    spec = root / "spec.yaml"
    spec.write_text(ADOPTION_SPEC)
    return written, old, spec


def test_adopted_lightning_1x_checkpoint_validates_unchanged(lightning_checkpoints: tuple[Path, Path, Path]) -> None:
    _, path, spec = lightning_checkpoints
    code, _, err = run_cli("manifest", path, "--spec", spec, "--force")
    assert code == 0, err
    manifest = load_manifest(f"{path}.ckptspec.yaml")
    (optimizer,) = manifest.components.optimizer
    assert [(ref.name, ref.shape) for ref in optimizer.param_groups[0].params] == [(None, None)] * 6
    assert any(line.startswith("optimizer.param_names") for line in manifest.unknown)
    assert manifest.components.config.hyperparameters == {"lr": 0.05, "net": {"hidden": 4, "dims": [3, 4], "norm": None}, "stages": [1, 2.5, "x"]}
    code, out, _ = run_cli("validate", path, "--format", "json")
    assert code == 0, out
    assert json.loads(out)["results"][0]["findings"] == []


def test_adopted_lightning_checkpoint_resumes_and_reports_what_was_unknown(lightning_checkpoints: tuple[Path, Path, Path], tmp_path: Path) -> None:
    path, _, spec = lightning_checkpoints
    run_cli("manifest", path, "--spec", spec, "--force")
    callback = CkptspecCallback()
    with pytest.warns(RestoreNote, match="optimizer 0: its class was not recorded"):
        _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(WildModule(), ckpt_path=path, weights_only=False)
    report = callback.last_report
    assert report.tensors_loaded == report.tensors_saved and report.restored == ("model", "optimizer", "scheduler", "data_position")
    assert "optimizer 0: its parameter names were not recorded; only the group sizes were compared" in report.notes


def test_torch_restore_of_an_adopted_plain_torch_save_dict(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "plain.pt"
    torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "epoch": 3}, path)
    code, _, err = run_cli("manifest", path)
    assert code == 0, err

    restored = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    restored_optimizer = torch.optim.SGD(restored.parameters(), lr=0.1, momentum=0.9)
    with pytest.warns(RestoreNote, match="optimizer 0: its class was not recorded"):
        report = ckpt.restore(path, model=restored, optimizer=restored_optimizer)
    assert report.tensors_loaded == report.tensors_saved == 4
    assert all(torch.equal(restored.state_dict()[name], tensor) for name, tensor in model.state_dict().items())
    assert torch.equal(restored_optimizer.state_dict()["state"][0]["momentum_buffer"], optimizer.state_dict()["state"][0]["momentum_buffer"])


def test_torch_restore_of_a_manifest_pointing_at_nothing_is_a_restore_error(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    path = tmp_path / "moved.pt"
    torch.save({"model_state_dict": model.state_dict()}, path)
    run_cli("manifest", path)
    torch.save({"weights": model.state_dict()}, path)  # rewritten after adoption under another key
    with pytest.raises(RestoreError, match=re.escape("the manifest places the model's state dict at '/model_state_dict'")):
        ckpt.restore(path, model=torch.nn.Linear(3, 1))


def test_adopted_tensorflow_learning_rate_is_the_decimal_written(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    _without_manifest(path)
    code, _, err = run_cli("manifest", path)
    assert code == 0, err
    (optimizer,) = load_manifest(f"{path}.ckptspec.yaml").components.optimizer
    assert optimizer.param_groups[0].hyperparameters["learning_rate"] == 0.01  # Adam(1e-2), stored as float32
    assert "learning_rate: 0.01\n" in Path(f"{path}.ckptspec.yaml").read_text()
    assert "CKS304" not in {f.code for f in validate(path).findings}  # the bundle's float32 is that decimal


def test_torch_restore_of_an_adopted_file_pickling_other_objects(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    path = tmp_path / "with-args.pt"
    torch.save({"model_state_dict": model.state_dict(), "args": argparse.Namespace(lr=0.1)}, path)
    code, _, err = run_cli("manifest", path)
    assert code == 0, err
    with pytest.raises(RestoreError, match=r"torch.load\(weights_only=True\) refuses it \(.*argparse.Namespace"):
        ckpt.restore(path, model=torch.nn.Linear(3, 1))

    trusted = ckpt.Checkpoint(path, load_manifest(f"{path}.ckptspec.yaml"), torch.load(path, weights_only=False))
    restored = torch.nn.Linear(3, 1)
    report = ckpt.restore(trusted, model=restored)
    assert report.tensors_loaded == 2 and torch.equal(restored.weight, model.weight)


def test_adoption_records_hyperparameters_as_the_callback_does(tmp_path: Path) -> None:
    torch.manual_seed(0)
    _trainer(tmp_path, 1, CkptspecCallback()).fit(WildModule())
    (path,) = (tmp_path / "checkpoints").glob("*.ckpt")
    by_callback = load_manifest(f"{path}.ckptspec.yaml").components.config.hyperparameters
    _without_manifest(path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(ADOPTION_SPEC)
    code, _, err = run_cli("manifest", path, "--spec", spec)
    assert code == 0, err
    assert load_manifest(f"{path}.ckptspec.yaml").components.config.hyperparameters == by_callback
