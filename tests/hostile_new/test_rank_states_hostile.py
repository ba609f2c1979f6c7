"""A manifest's per-rank record is the uploader's: a world size of 10⁹ and thousands of states all
naming one large part of the checkpoint cost what the manifest and the checkpoint hold, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from ckptspec import validate
from ckptspec.checks import sharded
from ckptspec.adopt import adopt

torch = pytest.importorskip("torch")

STATES = 5000
LEAVES = 5000


@pytest.fixture(scope="module")
def hostile_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch.save checkpoint whose first rank state holds thousands of tensors, and its adopted
    manifest rewritten to claim 10⁹ ranks with thousands of states, every generator at that state."""
    path = tmp_path_factory.mktemp("ranks") / "model.pt"
    torch.save({"model": {"w": torch.zeros(4)}, "rank_states": [{f"g{i}": torch.zeros(1) for i in range(LEAVES)}]}, path)
    manifest = adopt(path)
    document = yaml.safe_load(manifest.read_text())
    states = [{"rank": rank, "rng": {"generators": [{"name": "torch", "at": "/rank_states/0", "sha256": f"{rank:064x}"}]}} for rank in range(STATES)]
    document.setdefault("components", {})["ranks"] = {"at": "/rank_states", "world_size": 10**9, "states": states}
    manifest.write_text(yaml.safe_dump(document))
    return path


def test_a_claimed_world_size_and_one_subtree_named_by_every_state_are_read_once(
    hostile_ranks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks: list[str] = []
    leaves = sharded._leaves

    def counted(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
        if not path:
            walks.append(path)
        return leaves(value, path)

    monkeypatch.setattr(sharded, "_leaves", counted)
    result = validate(hostile_ranks)

    missing = [f.message for f in result.findings if f.code == "CKS247"]
    assert f"world size {10**9} but no state of rank {STATES}, {STATES + 1}, {STATES + 2} (and more)" in missing[0]
    assert "holds the state of 1 of the 1000000000 ranks" in missing[1]
    copied = [f.message for f in result.findings if f.code == "CKS248"]
    assert len(copied) == 1 and copied[0].startswith("ranks 0, 1, 2 (and more) hold the same torch generator state")
    # The one place all 5,000 states name is walked once, not once per state (39 s of walking then).
    assert len(walks) == 1
