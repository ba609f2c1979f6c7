"""CKS308 parameter-not-optimized on real torch saves: a weight tied to another is one parameter,
held by the optimizer under one of its names; a parameter left out of the optimizer is found."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import validate  # noqa: E402


class TiedLanguageModel(torch.nn.Module):
    """An embedding whose matrix is also the output projection, as GPT-2 and T5 tie them."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(16, 8)
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(self.embedding(tokens))))


def _trained_save(path: Path, model: torch.nn.Module, parameters: list[torch.nn.Parameter]) -> Path:
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(parameters, lr=1e-3)
    model(torch.arange(4)).sum().backward()
    optimizer.step()
    ckpt.save(path, model=model, optimizer=optimizer)
    return path


def _not_optimized(path: Path) -> list[str]:
    return [finding.message for finding in validate(path).findings if finding.code == "CKS308"]


def test_a_tied_weight_is_optimized_under_its_other_name(tmp_path: Path) -> None:
    model = TiedLanguageModel()
    path = _trained_save(tmp_path / "tied.pt", model, list(model.parameters()))
    assert "head.weight" in torch.load(path, weights_only=True)["model"]  # saved under both names
    assert _not_optimized(path) == []


def test_a_parameter_left_out_of_the_optimizer_is_found(tmp_path: Path) -> None:
    model = TiedLanguageModel()
    left_out = [model.embedding.weight, model.body.weight]
    path = _trained_save(tmp_path / "partial.pt", model, left_out)
    assert _not_optimized(path) == ["model parameter body.bias is in no optimizer param group"]
