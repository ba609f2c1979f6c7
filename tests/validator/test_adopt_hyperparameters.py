"""Hyper-parameters with no JSON form below the top level: adoption and the Lightning callback record
the rest of each dict and name every part they leave out under `unknown:`, by its path. Devices and
dtypes are recorded by name, the same way on both sides."""

from __future__ import annotations

import enum
import shutil
from pathlib import Path, PurePosixPath

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from ckptspec import load_manifest, manifest_path_for
from ckptspec.lightning import CkptspecCallback

from .conftest import run_cli


class Stage(enum.Enum):
    PRETRAIN = 1


def _name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


class NestedModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters({
            "lr": 0.05,
            "device": torch.device("cpu"),
            "precision": torch.bfloat16,
            "model": {
                "encoder": {
                    "width": 4,
                    "kernel": (3, 3),
                    "root": PurePosixPath("/data/train"),
                    "stage": Stage.PRETRAIN,
                    "activation": torch.nn.ReLU,
                    "dropout": float("nan"),
                    "files": [1, PurePosixPath("a.csv")],
                    "blocks": [{"depth": 2, "stage": Stage.PRETRAIN}],
                },
                "heads": OmegaConf.create({"sizes": [3, 1], "names": ["a", "b"], "shared": {"scale": 0.5}}),
            },
        })  # fmt: skip
        self.net = torch.nn.Linear(3, 1)

    def training_step(self, batch: tuple[torch.Tensor], batch_index: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)


RECORDED = {
    "lr": 0.05,
    "device": "cpu",
    "precision": "torch.bfloat16",
    "model": {
        "encoder": {"width": 4, "kernel": [3, 3], "blocks": [{"depth": 2}]},
        "heads": {"sizes": [3, 1], "names": ["a", "b"], "shared": {"scale": 0.5}},
    },
}
LEFT_OUT = [
    "config.hyperparameters.model.encoder.root: a pathlib.PurePosixPath, which has no JSON form",
    f"config.hyperparameters.model.encoder.stage: a {_name(Stage)}, which has no JSON form",
    "config.hyperparameters.model.encoder.activation: the class torch.nn.modules.activation.ReLU, which has no JSON form",
    "config.hyperparameters.model.encoder.dropout: the float nan, which has no JSON form",
    "config.hyperparameters.model.encoder.files: item 1 is a pathlib.PurePosixPath, which has no JSON form; the whole list is left out",
    f"config.hyperparameters.model.encoder.blocks[0].stage: a {_name(Stage)}, which has no JSON form",
]


@pytest.fixture(scope="session")
def nested_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A real checkpoint of `NestedModule` with the callback's manifest, a copy adopted by `ckptspec
    manifest`, and the operator's spec that trusts the two classes the pickle names."""
    root = tmp_path_factory.mktemp("nested-hparams")
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root, callbacks=[CkptspecCallback()])  # fmt: skip
    trainer.fit(NestedModule())
    (written,) = (root / "checkpoints").glob("*.ckpt")
    adopted = root / "adopted" / written.name
    adopted.parent.mkdir()
    shutil.copy(written, adopted)
    spec = root / "spec.yaml"
    spec.write_text(
        'ckptspec: "1.0"\nkind: spec\nname: nested\nframework: lightning\n'
        "components:\n  config: {require: optional}\n  rng: {require: optional}\n  fingerprint: {require: optional}\n"
        f'pickle: {{allow: ["{_name(Stage)}", "torch.nn.modules.activation.ReLU"]}}\n'
    )
    code, _, err = run_cli("manifest", adopted, "--spec", spec)
    assert code == 0, err
    return written, adopted, spec


def test_adoption_records_nested_values_and_names_each_one_left_out(nested_checkpoint: tuple[Path, Path, Path]) -> None:
    _, adopted, _ = nested_checkpoint
    manifest = load_manifest(manifest_path_for(adopted))
    assert manifest.components.config.hyperparameters == RECORDED
    assert [line for line in manifest.unknown if line.startswith("config.hyperparameters")] == LEFT_OUT


def test_the_callback_records_and_names_the_same(nested_checkpoint: tuple[Path, Path, Path]) -> None:
    written, _, _ = nested_checkpoint
    manifest = load_manifest(manifest_path_for(written))
    assert manifest.components.config.hyperparameters == RECORDED
    assert [line for line in manifest.unknown if line.startswith("config.hyperparameters")] == LEFT_OUT


def test_the_adopted_file_validates_unchanged(nested_checkpoint: tuple[Path, Path, Path]) -> None:
    _, adopted, spec = nested_checkpoint
    code, out, _ = run_cli("validate", adopted, "--spec", spec)
    assert code == 0, out
