"""Session-wide corpora: plain torch.save files, and checkpoints from two real Lightning `Trainer.fit` runs."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def plain_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    from ._torch_corpus import write_plain_corpus

    return write_plain_corpus(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="session")
def lightning_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`epoch=*.ckpt` and `last.ckpt` from ModelCheckpoint, a mid-epoch `step=*.ckpt`, `weights_only.ckpt`
    (16-mixed with a CPU GradScaler, Adam + StepLR, EarlyStopping, hparams and datamodule state), and
    `manual.ckpt` (manual optimization, bf16-mixed)."""
    pytest.importorskip("pytorch_lightning")
    directory = tmp_path_factory.mktemp("lightning")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {**_fit_automatic(directory), **_fit_manual(directory)}


def _trainer(directory: Path, **options: Any) -> Any:
    import pytorch_lightning as pl

    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=directory, **options,
    )  # fmt: skip


def _fit_automatic(directory: Path) -> dict[str, Path]:
    import torch
    from ._lightning_models import LitData, LitRegressor
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
    from pytorch_lightning.plugins.precision import MixedPrecision

    # On CPU, precision="16-mixed" silently becomes bf16 and saves no scaler; a plugin built with a
    # CPU GradScaler is the way to get a real `MixedPrecision` scaler state from Trainer.fit.
    precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    best = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_top_k=2, save_last=True)
    mid_epoch = ModelCheckpoint(dirpath=directory / "steps", every_n_train_steps=3, save_top_k=-1,
                                filename="{step}")  # fmt: skip
    trainer = _trainer(
        directory, max_epochs=2, limit_train_batches=4, limit_val_batches=2, plugins=[precision],
        callbacks=[EarlyStopping(monitor="val_loss", patience=3), best, mid_epoch],
    )  # fmt: skip
    trainer.fit(LitRegressor(lr=0.05, hidden=6), datamodule=LitData(batch_size=2))
    trainer.save_checkpoint(directory / "weights_only.ckpt", weights_only=True)
    files = {path.name: path for path in directory.glob("*.ckpt")}
    files.update({path.name: path for path in (directory / "steps").glob("*.ckpt")})
    return files


def _fit_manual(directory: Path) -> dict[str, Path]:
    from ._lightning_models import LitData, LitManual

    trainer = _trainer(directory, max_epochs=1, limit_train_batches=3, limit_val_batches=0, precision="bf16-mixed",
                       enable_checkpointing=False)  # fmt: skip
    trainer.fit(LitManual(), datamodule=LitData(batch_size=4))
    trainer.save_checkpoint(directory / "manual.ckpt")
    return {"manual.ckpt": directory / "manual.ckpt"}
