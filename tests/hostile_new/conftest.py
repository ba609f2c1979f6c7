from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._store import HostileStore


@pytest.fixture
def store() -> Iterator[type[HostileStore]]:
    HostileStore.reset()
    yield HostileStore
    HostileStore.reset()


@pytest.fixture(scope="session")
def torch_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `torch.save` checkpoint."""
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("torch") / "model.pt"
    torch.save({"model": torch.nn.Linear(64, 64).state_dict(), "step": 3}, path)
    return path
