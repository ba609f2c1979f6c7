"""Tiny models and training steps shared by the adapter tests; CPU only."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
numpy = pytest.importorskip("numpy")

from torch import nn  # noqa: E402


class Net(nn.Module):
    """Linear → BatchNorm → activation → dropout → head; the BatchNorm eps and head size are the knobs."""

    def __init__(self, eps: float = 1e-5, classes: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        self.features = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8, eps=eps)
        self.act = nn.LeakyReLU(0.05)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.act(self.bn(self.features(x)))))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: object = None) -> None:
    """One step whose data and noise come from all three global generators, so RNG restore matters."""
    inputs = torch.randn(16, 4) + random.random() + float(numpy.random.rand())
    targets = torch.randint(0, 3, (16,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(inputs), targets).backward()
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
