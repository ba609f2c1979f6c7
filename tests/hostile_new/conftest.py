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
def torch_file(real_files: dict[str, Path]) -> Path:
    """A real `torch.save` checkpoint."""
    return real_files["torch-zip"]


@pytest.fixture(scope="session")
def real_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small checkpoint per format the real libraries write: a torch zip, a legacy torch file
    and a safetensors file, each alone in its folder."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    state = {"model": torch.nn.Linear(256, 256).state_dict(), "step": 3}
    files = {kind: tmp_path_factory.mktemp(kind) / name for kind, name in [("torch-zip", "model.pt"), ("legacy-torch", "model.pt"), ("safetensors", "model.safetensors")]}
    torch.save(state, files["torch-zip"])
    torch.save(state, files["legacy-torch"], _use_new_zipfile_serialization=False)
    safetensors_torch.save_file(state["model"], files["safetensors"])
    return files
