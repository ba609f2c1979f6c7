"""A tiny LightningModule trained with a real `Trainer.fit` for the validator's tests."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class TinyRegressor(pl.LightningModule):
    def __init__(self, hidden: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        features, targets = batch
        return torch.nn.functional.mse_loss(self(features), targets)

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)}


def fit(directory: Path, callbacks: list[pl.Callback] | None = None) -> Path:
    """Train two epochs of four batches; return the checkpoint ModelCheckpoint wrote."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=directory, callbacks=callbacks or [],
    )  # fmt: skip
    trainer.fit(TinyRegressor(), DataLoader(data, batch_size=4))
    (checkpoint,) = (directory / "checkpoints").glob("*.ckpt")
    return checkpoint
