"""A LightningModule trained the way users configure real runs (callbacks, accumulation, bf16)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, StochasticWeightAveraging
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Regressor(pl.LightningModule):
    def __init__(self, lr: float = 0.01, widths: tuple[int, ...] = (3, 8), optimizer: dict[str, object] | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        features, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(features), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> None:
        features, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(features), targets))

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=2), "interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def fit_with_callbacks(directory: Path) -> Path:
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
    callbacks = [
        EarlyStopping("val_loss"),
        LearningRateMonitor(),
        ModelCheckpoint(dirpath=directory / "checkpoints", monitor="val_loss", save_top_k=2, save_last=True),
        StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=1),
    ]
    trainer = pl.Trainer(
        max_epochs=3, accelerator="cpu", devices=1, precision="bf16-mixed", accumulate_grad_batches=2,
        logger=CSVLogger(directory), enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
    )  # fmt: skip
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Regressor(optimizer={"name": "adamw", "betas": (0.9, 0.99)}), data, data)
    return directory / "checkpoints" / "last.ckpt"
