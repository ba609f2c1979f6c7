"""Fixtures shared by the adapter tests."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture()
def fixed_batch() -> torch.Tensor:
    return torch.linspace(-2, 2, 24).reshape(6, 4)
