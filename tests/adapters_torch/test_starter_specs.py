"""`ckptspec init` starter specs are met by the documented usage of their framework: the save runs,
`ckptspec validate` passes, and the resume is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec.cli import cli  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

from ._tiny import Net, seed_everything, train_step  # noqa: E402
from .test_lightning import FIXED_BATCH, TinyModule, _trainer  # noqa: E402


def _starter(framework: str, directory: Path) -> Path:
    path = directory / "ckptspec.yaml"
    result = CliRunner().invoke(cli, ["init", "--name", "starter", "--framework", framework, "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _validate(path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_torch_starter_spec_is_met_by_the_documented_save_and_restore(tmp_path):
    spec = _starter("torch", tmp_path)
    seed_everything(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    train_step(model, optimizer, scheduler)
    position = ckpt.DataPosition(epoch=0, global_step=1)
    path = tmp_path / "step-1.pt"
    ckpt.save(path, model=model, optimizer=optimizer, scheduler=scheduler, data_position=position, fingerprint_batch=FIXED_BATCH, spec=spec)
    _validate(path)

    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    report = ckpt.restore(path, model=model, optimizer=optimizer, scheduler=scheduler, data_position=ckpt.DataPosition())
    assert report.restored == ("model", "optimizer", "scheduler", "rng", "data_position", "fingerprint")
    assert report.fingerprint_replayed and report.notes == ()


def test_lightning_starter_spec_is_met_by_the_documented_callback(tmp_path):
    spec = _starter("lightning", tmp_path)
    seed_everything(0)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last="link")
    _trainer(tmp_path, 1, checkpoints, CkptspecCallback(spec=spec, fingerprint_batch=FIXED_BATCH)).fit(TinyModule())
    last = tmp_path / "ckpt" / "last.ckpt"
    _validate(last)

    callback = CkptspecCallback(spec=spec, fingerprint_batch=FIXED_BATCH)
    _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(TinyModule(), ckpt_path=last)
    assert callback.last_report.restored == ("model", "optimizer", "scheduler", "rng", "data_position", "fingerprint")
