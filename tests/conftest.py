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
    """Every document read in the suite's own process by a fast path, as a model or as a plain
    record, is also validated by pydantic, and the two must build the same document (see
    `ckptspec._models.construct` and `ckptspec._plain`)."""
    from ckptspec import _documents
    from ckptspec._models import construct

    from ._fast_documents import checked_construct, checked_record

    original_construct, original_record = construct.construct, _documents.record
    construct.construct, _documents.record = checked_construct(original_construct), checked_record(original_record)
    yield
    construct.construct, _documents.record = original_construct, original_record


@pytest.fixture(autouse=True)
def _lightning_seed_left_unset() -> Any:
    """`seed_everything` records its seed in the environment (`PL_GLOBAL_SEED`), and Lightning
    re-seeds every process it starts from there: left behind by one test, it would make a later
    multi-process fit seed all its ranks alike."""
    import os

    before = {name: value for name, value in os.environ.items() if name.startswith("PL_")}
    yield
    for name in [name for name in os.environ if name.startswith("PL_")]:
        if name not in before:
            del os.environ[name]
    os.environ.update(before)
