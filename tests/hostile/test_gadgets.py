"""Each real gadget runs under the real loader, and ckptspec calls it dangerous without running it."""

from __future__ import annotations

import importlib

import pytest

from ._gadgets import GADGETS
from .conftest import IN_TORCH_FILES, Hostile



def _as_pickled(module: str, attribute: str) -> str:
    """The name a pickler writes for `module.attribute`: where the object says it lives (`posix.system`)."""
    return f"{getattr(importlib.import_module(module), attribute).__module__}.{attribute}"


CASES = [(g.name, g.named) for g in GADGETS] + [(f"{name}.pt", _as_pickled(*target)) for name, target in IN_TORCH_FILES.items()]


@pytest.mark.parametrize(("case", "named"), CASES, ids=[case for case, _ in CASES])
def test_proven_gadget_is_judged_dangerous_and_never_run(hostile: dict[str, Hostile], case: str, named: str) -> None:
    entry = hostile[case]
    assert entry.proven, f"{case}: the real loader did not run the payload, so the case proves nothing"
    assert not entry.marker_after_ckptspec
    assert entry.exit_code == 1 and "CKS401" in entry.codes
    assert named in entry.dangerous, entry.dangerous
    assert entry.adoption_refused


def test_gadgets_span_the_modules_of_the_threat_model() -> None:
    modules = {g.named.split(".")[0] for g in GADGETS}
    assert len(modules) >= 15, modules
