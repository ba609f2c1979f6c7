"""`ckptspec.torch.save_sharded` / `restore_sharded` on 2 real ranks: each rank's generators come
back to that rank, the manifest is written after the save, another world size is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptspec import validate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def round_trip(fsdp_dir: Path) -> tuple[Path, list[dict]]:
    """The round trip the two ranks that wrote `fsdp_dir` made beside it."""
    directory = fsdp_dir.with_name(f"{fsdp_dir.name}-adapter")
    return directory, [json.loads(Path(f"{directory}.rank{rank}.json").read_text()) for rank in range(2)]


def test_each_rank_gets_its_own_generators_back(round_trip: tuple[Path, list[dict]]) -> None:
    _, ranks = round_trip
    for result in ranks:
        assert result["after_restore"] == result["after_save"]
        assert result["report"] == [2, 2, True]
        assert result["weights"][0] == pytest.approx(result["weights"][1])
    assert ranks[0]["after_restore"] != ranks[1]["after_restore"]  # rank 0's state was not restored everywhere


def test_manifest_written_after_the_commit_validates(round_trip: tuple[Path, list[dict]]) -> None:
    directory, _ = round_trip
    assert directory.with_name(f"{directory.name}.ckptspec.yaml").is_file()
    codes = {finding.code for finding in validate(directory).findings}
    assert codes <= {"CKS004", "CKS242"}, codes


def test_another_world_size_is_refused_unless_resharding(round_trip: tuple[Path, list[dict]]) -> None:
    _, ranks = round_trip
    assert "saved by 2 ranks, restoring on 1" in ranks[0]["refused"]
    rng_restored, weight_sum = ranks[0]["resharded"]
    assert rng_restored is False and weight_sum == pytest.approx(ranks[0]["weights"][0])
