"""Session-wide real files: legacy torch.save, safetensors (single and sharded), TorchScript archives."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def legacy_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    from ._corpus import write_legacy_corpus

    return write_legacy_corpus(tmp_path_factory.mktemp("legacy"))


@pytest.fixture(scope="session")
def safetensors_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("safetensors")
    from ._corpus import write_safetensors_corpus

    return write_safetensors_corpus(tmp_path_factory.mktemp("safetensors"))


@pytest.fixture(scope="session")
def torchscript_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    from ._corpus import write_torchscript_corpus

    return write_torchscript_corpus(tmp_path_factory.mktemp("torchscript"))
