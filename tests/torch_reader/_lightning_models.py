"""Tiny LightningModules and a stateful datamodule for the Lightning corpus."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class LitData(pl.LightningDataModule):
    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self.save_hyperparameters()
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(16, 4, generator=generator)
        self.targets = torch.randn(16, 1, generator=generator)
        self.loaders_made = 0

    def train_dataloader(self) -> DataLoader:
        self.loaders_made += 1
        return DataLoader(TensorDataset(self.inputs, self.targets), batch_size=self.hparams.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.inputs, self.targets), batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"loaders_made": self.loaders_made, "seed": 0}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaders_made = state_dict["loaders_made"]


class LitRegressor(pl.LightningModule):
    def __init__(self, lr: float, hidden: int) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(inputs), targets))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class LitManual(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        inputs, targets = batch
        optimizer.zero_grad()
        self.manual_backward(torch.nn.functional.mse_loss(self.net(inputs), targets))
        optimizer.step()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
