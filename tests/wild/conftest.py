"""Checkpoints in the shapes other libraries give them, written by real torch calls.

Hugging Face `transformers` and `timm` are not installed where the tests run, so each fixture makes
the same `torch.save` calls those libraries make (named in its docstring), on a real model and
optimizer after a real training step.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from ckptspec.cli import cli


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


def _trained() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(16, 8), nn.LayerNorm(8), nn.Linear(8, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


@pytest.fixture(scope="session")
def trainer_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `transformers.Trainer` `checkpoint-N/` directory: `_save_optimizer_and_scheduler` writes
    `optimizer.pt`, `scheduler.pt` (a LambdaLR's state) and `scaler.pt` with one `torch.save` of each
    object's `state_dict()`; `_save_rng_state` writes `rng_state.pth` as a dict of generator states
    keyed `python`, `numpy`, `cpu` (and `cuda` on GPUs)."""
    directory = tmp_path_factory.mktemp("trainer") / "checkpoint-1"
    directory.mkdir()
    model, optimizer, scheduler = _trained()
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    torch.save(optimizer.state_dict(), directory / "optimizer.pt")
    torch.save(scheduler.state_dict(), directory / "scheduler.pt")
    torch.save(torch.amp.GradScaler("cpu").state_dict(), directory / "scaler.pt")
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    torch.save(states, directory / "rng_state.pth")
    return directory


@pytest.fixture(scope="session")
def odd_state_dicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Module state dicts holding more than dense tensors: a dynamically quantized model's (packed
    weights as a tuple, a dtype beside them) and a model with a sparse buffer."""
    directory = tmp_path_factory.mktemp("state-dicts")
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)), {nn.Linear})
    sparse = nn.Linear(4, 4)
    sparse.register_buffer("mask", torch.eye(4).to_sparse())
    paths = {"quantized": directory / "quantized.pt", "sparse": directory / "sparse.pt"}
    torch.save(quantized.state_dict(), paths["quantized"])
    torch.save(sparse.state_dict(), paths["sparse"])
    return paths


@pytest.fixture(scope="session")
def timm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What timm's `CheckpointSaver` writes (`checkpoint-<epoch>.pth.tar`): one `torch.save` of a dict
    with `epoch`, `arch`, `state_dict`, `optimizer`, `version`, `args` (the training script's
    `argparse.Namespace`), `metric` and the EMA model's `state_dict_ema`."""
    model, optimizer, _ = _trained()
    average = torch.optim.swa_utils.AveragedModel(model)
    state = {
        "epoch": 3,
        "arch": "tiny",
        "state_dict": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "version": 2,
        "args": argparse.Namespace(model="tiny", lr=0.1, epochs=10),
        "metric": 0.5,
        "state_dict_ema": average.module.state_dict(),
    }
    path = tmp_path_factory.mktemp("timm") / "checkpoint-3.pth.tar"
    torch.save(state, path)
    return path


@pytest.fixture(scope="session")
def lightning_with_callbacks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `Trainer.fit` with the callbacks and settings users add: EarlyStopping, LearningRateMonitor,
    ModelCheckpoint on a monitored metric, StochasticWeightAveraging, gradient accumulation,
    bf16-mixed precision and a per-step scheduler; returns its `last.ckpt`."""
    from ._lightning import fit_with_callbacks

    return fit_with_callbacks(tmp_path_factory.mktemp("lightning"))


@pytest.fixture(scope="session")
def model_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `save_pretrained` writes: `config.json` (and `generation_config.json`) beside
    `model.safetensors`, saved by `safetensors.torch.save_file` with `{"format": "pt"}` metadata, a
    tied output embedding left out as transformers leaves it out."""
    from safetensors.torch import save_file

    directory = tmp_path_factory.mktemp("hub") / "tiny-gpt"
    directory.mkdir()
    model, _, _ = _trained()
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()}, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "config.json").write_text('{"model_type": "tiny", "vocab_size": 16}\n')
    (directory / "generation_config.json").write_text('{"max_length": 8}\n')
    return directory


@pytest.fixture(scope="session")
def legacy_h5(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("keras")
    from ._keras_legacy import write_legacy_saves

    return write_legacy_saves(tmp_path_factory.mktemp("legacy-h5"))
