"""The run ledger over a real 2-process Lightning DDP run, interrupted after six steps and resumed
to ten: the resume that restores every rank's generators continues the run; the one that seeds
again after the restore is caught on each rank, at the first checkpoint it wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ckptspec.lineage import judge_run

from . import _lightning_ddp
from .test_lightning_ddp import _free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lightning-ddp-lineage")
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("PL_")]:
            patch.delenv(name)  # a seed left by an earlier fit would make Lightning seed every rank alike
        mp.spawn(_lightning_ddp.fit_interrupted_and_resumed, args=(str(root), _free_port()), nprocs=_lightning_ddp.WORLD, join=True)
    return root


def test_the_restored_resume_continues_the_run_on_every_rank(runs: Path) -> None:
    judgement = judge_run([runs / "restored"])
    assert [finding for finding in judgement.report.findings if finding.severity == "error"] == []
    assert len({facts.run for facts in judgement.graph.checkpoints}) == 1
    assert sorted(facts.global_step for facts in judgement.graph.checkpoints) == [2, 4, 6, 8, 10]
    ranks = {rank for facts in judgement.graph.checkpoints for rank, _ in facts.generators}
    assert ranks == {0, 1}


def _draws(runs: Path, name: str, rank: int) -> dict[int, float]:
    return {int(step): value for step, value in json.loads((runs / f"{name}-rank{rank}.json").read_text()).items()}


def test_seeding_after_the_restore_replays_the_runs_first_draws(runs: Path) -> None:
    """The failure is real without ckptspec: after the re-seeded resume each rank draws again what
    it drew in the run's first steps; after the restored one it does not."""
    for rank in range(_lightning_ddp.WORLD):
        reseeded, restored = _draws(runs, "reseeded", rank), _draws(runs, "restored", rank)
        assert sorted(reseeded) == sorted(restored) == list(range(1, 11))
        assert [reseeded[step] for step in (7, 8)] == [reseeded[step] for step in (1, 2)]
        assert [restored[step] for step in (7, 8)] != [restored[step] for step in (1, 2)]
    assert _draws(runs, "reseeded", 0)[1] != _draws(runs, "reseeded", 1)[1]  # each rank has its own generators


def test_seeding_after_the_restore_is_caught_on_each_rank(runs: Path) -> None:
    errors = [finding for finding in judge_run([runs / "reseeded"]).report.findings if finding.severity == "error"]
    assert {(finding.code, Path(finding.checkpoint).name) for finding in errors} == {("CKS510", "epoch=1-step=8.ckpt")}
    messages = " ".join(finding.message for finding in errors)
    assert "rank 0's torch generator" in messages and "rank 1's torch generator" in messages


def test_without_the_callbacks_generators_the_files_cannot_show_it(runs: Path, tmp_path: Path) -> None:
    """Lightning's own checkpoints hold no generator state: with the manifests gone, nothing in the
    files tells a re-seeded resume from a restored one."""
    plain = tmp_path / "reseeded"
    plain.mkdir()
    for checkpoint in (runs / "reseeded").glob("*.ckpt"):
        (plain / checkpoint.name).write_bytes(checkpoint.read_bytes())
    judgement = judge_run([plain])
    assert all(not facts.generators for facts in judgement.graph.checkpoints)
    assert [finding for finding in judgement.report.findings if finding.code == "CKS510"] == []
