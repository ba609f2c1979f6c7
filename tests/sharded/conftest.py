"""Sharded directories written once per session by real process groups (spawned ranks, gloo)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from . import _ranks


def _spawn(function: Callable[..., None], world: int, directory: Path) -> Path:
    mp.spawn(function, args=(world, str(directory), str(directory.parent / f"{directory.name}.store")), nprocs=world, join=True)
    return directory


@pytest.fixture(scope="session")
def fsdp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks, FSDP2 `fully_shard` model and AdamW state."""
    return _spawn(_ranks.save_fully_sharded, 2, tmp_path_factory.mktemp("fsdp") / "ckpt")


@pytest.fixture(scope="session")
def rows_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks, DTensors sharded along rows and columns; `-per-rank` beside it saved without collectives."""
    return _spawn(_ranks.save_row_sharded, 4, tmp_path_factory.mktemp("rows") / "ckpt")


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    """A private copy of a session directory, to damage."""

    def copy(source: Path) -> Path:
        return Path(shutil.copytree(source, tmp_path / source.name))

    return copy


@pytest.fixture(scope="session")
def lightning_dir(fsdp_dir: Path) -> Path:
    """pytorch_lightning's FSDPStrategy layout: the sharded model and optimizer the ranks saved with
    the strategy's own DCP function, and `meta.pt`, the rest of a real Trainer's checkpoint as the
    strategy writes it from rank 0. Not exercised: the Trainer wrapping the model in FSDP itself
    (the strategy expects CUDA devices for that)."""
    import pytorch_lightning as pl

    from ..torch_reader._lightning_models import LitData, LitRegressor

    directory = fsdp_dir.with_name(f"{fsdp_dir.name}-lightning")
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(LitRegressor(lr=0.01, hidden=_ranks.WIDTH), datamodule=LitData(batch_size=4))
    checkpoint = trainer._checkpoint_connector.dump_checkpoint()
    checkpoint.pop("state_dict")
    checkpoint.pop("optimizer_states")
    torch.save(checkpoint, directory / "meta.pt")
    return directory


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks, DCP's HuggingFace storage layout; `-consolidated` beside it."""
    return _spawn(_ranks.save_hf_storage, 2, tmp_path_factory.mktemp("hf") / "ckpt")
