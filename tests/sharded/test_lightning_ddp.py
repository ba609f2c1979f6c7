"""`CkptspecCallback` under Lightning's DDP strategy, 2 real CPU processes: each rank's generators
and data position are saved, each rank gets its own back, the resume is bit-identical on every
rank, and a resume on another number of processes is refused unless resharding is allowed."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from ckptspec import RestoreError, validate
from ckptspec.lightning import CkptspecCallback

from . import _lightning_ddp
from ._lightning_ddp import BATCH, SAMPLES, WORLD, NoisyModule, trainer

pytestmark = pytest.mark.slow

STEPS_PER_EPOCH = SAMPLES // WORLD // BATCH


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("lightning-ddp")
    mp.spawn(_lightning_ddp.fit_and_resume, args=(str(root), _free_port()), nprocs=WORLD, join=True)
    return root, [json.loads((root / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


def _first_checkpoint(root: Path) -> Path:
    return root / "checkpoints" / f"epoch=0-step={STEPS_PER_EPOCH}.ckpt"


def test_every_rank_resumes_bit_identically_with_its_own_generators(ddp_run: tuple[Path, list[dict]]) -> None:
    _, ranks = ddp_run
    for result in ranks:
        assert len(result["resumed"]) == STEPS_PER_EPOCH
        assert result["resumed"] == result["straight"]
        assert result["weights_identical"]
        assert result["generators"] == ["numpy", "python", "torch"]
        assert (result["data_position"]["epoch"], result["data_position"]["global_step"]) == (0, STEPS_PER_EPOCH)
    # The ranks drew different numbers: had rank 0's generators come back everywhere, they would not.
    assert ranks[0]["resumed"] != ranks[1]["resumed"]


def test_the_checkpoint_rank_zero_wrote_validates(ddp_run: tuple[Path, list[dict]]) -> None:
    root, _ = ddp_run
    assert not [finding for finding in validate(_first_checkpoint(root)).findings if finding.severity == "error"]


def test_another_world_size_is_refused_unless_resharding(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run
    with pytest.raises(RestoreError, match="saved with world size 2, resumed with 1"):
        trainer(tmp_path, CkptspecCallback(), devices=1, enable_checkpointing=False).fit(NoisyModule(), ckpt_path=_first_checkpoint(root))

    callback = CkptspecCallback(allow_resharding=True)
    trainer(tmp_path, callback, devices=1, enable_checkpointing=False).fit(NoisyModule(), ckpt_path=_first_checkpoint(root))
    assert callback.last_report is not None and callback.last_report.generators == ()
    assert any("no saved rank's random generators were restored" in note for note in callback.last_report.notes)


def test_a_malformed_per_rank_state_is_refused(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run
    source = _first_checkpoint(root)
    checkpoint = torch.load(source, weights_only=True)
    checkpoint["callbacks"]["CkptspecCallback"]["ranks"] = "rank 0 only"
    tampered = tmp_path / source.name
    torch.save(checkpoint, tampered)
    shutil.copy(f"{source}.ckptspec.yaml", f"{tampered}.ckptspec.yaml")
    with pytest.raises(RestoreError, match="CkptspecCallback/ranks: not a list of each rank's saved state"):
        trainer(tmp_path, CkptspecCallback(), devices=1, enable_checkpointing=False).fit(NoisyModule(), ckpt_path=tampered)
