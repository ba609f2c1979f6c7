from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True, scope="session")
def _fast_documents_match_validation() -> Any:
    """Every document read in the suite's own process by the fast path is also validated by pydantic,
    and the two must build the same document (see `ckptspec._models.construct`)."""
    from ckptspec import _documents

    from ._fast_documents import checked_construct

    original = _documents.construct
    _documents.construct = checked_construct(original)
    yield
    _documents.construct = original
