"""Sharded directories written once per session by real process groups (spawned ranks, gloo)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
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
