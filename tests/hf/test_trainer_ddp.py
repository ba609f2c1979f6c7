"""DDP with two CPU processes: every rank saves `rng_state_{rank}.pth`, and both are checked."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ckptspec import validate
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.lineage import judge_run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.multiprocessing as mp  # noqa: E402

from . import _trainer_ddp  # noqa: E402

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("trainer-ddp")
    mp.spawn(_trainer_ddp.train_and_resume, args=(str(root), _free_port()), nprocs=_trainer_ddp.WORLD, join=True)
    return root, [json.loads((root / f"rank{rank}.json").read_text()) for rank in range(_trainer_ddp.WORLD)]


def test_both_ranks_generators_are_saved_recorded_and_validated(ddp_run: tuple[Path, list[dict]]) -> None:
    checkpoint = ddp_run[0] / "run" / "checkpoint-8"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {path.name for path in checkpoint.iterdir()}
    manifest = (checkpoint / ".ckptspec.yaml").read_text()
    assert "at: /rng_state_0/cpu" in manifest and "at: /rng_state_1/cpu" in manifest
    assert "dataset_length: 20" in manifest and "batch_size: 4" in manifest
    assert "rng_state_1" in inspect_checkpoint(checkpoint).metadata["files"]
    assert validate(checkpoint).passed


def test_the_clean_resume_is_bit_identical_on_every_rank(ddp_run: tuple[Path, list[dict]]) -> None:
    assert [result["identical"] for result in ddp_run[1]] == [True, True]


def test_each_rank_records_its_own_next_batches_and_the_resume_draws_them(ddp_run: tuple[Path, list[dict]]) -> None:
    checkpoint = ddp_run[0] / "run" / "checkpoint-8"
    records = [json.loads((checkpoint / f".ckptspec.next-batches-{rank}.json").read_text()) for rank in range(_trainer_ddp.WORLD)]
    assert [record["rank"] for record in records] == [0, 1]
    assert records[0]["batches"] != records[1]["batches"], "each rank trains on its own share of the data"
    assert [result["data_order"] for result in ddp_run[1]] == ["matched", "matched"]


def test_a_missing_rank_file_is_named_on_every_rank_before_the_first_step(ddp_run: tuple[Path, list[dict]]) -> None:
    for result in ddp_run[1]:
        assert "rng_state_1.pth: the random generators were not restored" in result["refused"]
        assert "rng_state_0.pth" not in result["refused"]
        assert result["refused_at_step"] == 8


def test_the_resume_is_recorded_with_both_ranks_generators_and_judged_as_the_rollback_it_is(ddp_run: tuple[Path, list[dict]]) -> None:
    root = ddp_run[0]
    judgement = judge_run([root / "run", root / "resumed"])
    (resumed,) = [found for found in judgement.graph.links if found.resumed]
    assert (resumed.parent.checkpoint, resumed.child.checkpoint) == (root / "run" / "checkpoint-8", root / "resumed" / "checkpoint-12")
    # Each rank's generators are told apart by their states' digests, so a re-seeding shows on either rank.
    assert {"rng_state_0/torch", "rng_state_1/torch"} <= {name for _, name in resumed.child.generators}
    assert resumed.child.generators[(0, "rng_state_0/torch")] != resumed.child.generators[(0, "rng_state_1/torch")]
    # The second trainer resumed from checkpoint-8 while the first had already saved checkpoint-12.
    errors = {(finding.code, finding.checkpoint) for finding in judgement.report.findings if finding.severity == "error"}
    assert errors == {("CKS504", str(root / "resumed" / "checkpoint-12"))}


def test_a_resume_one_rank_refuses_is_refused_on_every_rank(ddp_run: tuple[Path, list[dict]]) -> None:
    """Rank 1's record names other batches: rank 1 refuses at its first batch and rank 0, whose
    batches are the run's, learns why there; without that, rank 0 trains on into an all-reduce that
    rank 1 never joins, and waits in it until rank 1's process is gone (then gloo's "Connection
    closed by peer", which says nothing of why) or the process group times out."""
    raised = [result["reordered"] for result in ddp_run[1]]
    assert raised[1] is not None and raised[1].startswith("RestoreError:") and "(rank 1) does not draw the batches" in raised[1]
    assert raised[0] is not None and raised[0].startswith("RestoreError: another rank refused the resume:") and "(rank 1)" in raised[0]
