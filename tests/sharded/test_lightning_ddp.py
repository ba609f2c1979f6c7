"""`CkptspecCallback` under Lightning's DDP strategy, 2 real CPU processes: each rank's generators
and data position are saved, each rank gets its own back, the resume is bit-identical on every
rank, and a resume on another number of processes is refused unless resharding is allowed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from ckptspec import RestoreError, validate
from ckptspec._documents import load_manifest
from ckptspec._sidecars import manifest_path_for
from ckptspec.lightning import CkptspecCallback

from . import _lightning_ddp
from ._torchless import without_torch
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
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("PL_")]:
            patch.delenv(name)  # a seed left by an earlier fit would make Lightning seed every rank alike
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


def test_every_rank_records_its_next_batches_and_the_resume_draws_them(ddp_run: tuple[Path, list[dict]]) -> None:
    root, ranks = ddp_run
    records = [json.loads(_first_checkpoint(root).with_name(f"{_first_checkpoint(root).name}.next-batches-{rank}.json").read_text()) for rank in range(WORLD)]
    assert [record["rank"] for record in records] == [0, 1]
    assert records[0]["manifest_sha256"] == records[1]["manifest_sha256"]  # rank 1 took rank 0's manifest digest
    assert records[0]["batches"] != records[1]["batches"]  # each rank trains on its own share of the data
    assert [result["data_order"] for result in ranks] == ["matched", "matched"]


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
    assert callback.last_report.data_order is not None and callback.last_report.data_order.status == "unchecked"
    assert "saved by 2 processes, resumed by 1" in callback.last_report.data_order.reason


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


def test_the_manifest_records_every_rank(ddp_run: tuple[Path, list[dict]]) -> None:
    root, _ = ddp_run
    checkpoint = _first_checkpoint(root)
    ranks = load_manifest(manifest_path_for(checkpoint)).components.ranks
    assert ranks is not None and ranks.world_size == WORLD and [state.rank for state in ranks.states] == [0, 1]
    saved = torch.load(checkpoint, weights_only=True)["callbacks"]["CkptspecCallback"]["ranks"]
    digests = []
    for state, own in zip(ranks.states, saved):
        assert state.rng is not None and state.data_position is not None
        assert [g.name for g in state.rng.generators] == list(own["rng"])
        assert (state.data_position.epoch, state.data_position.global_step) == (own["data_position"]["epoch"], STEPS_PER_EPOCH)
        digests.append([g.sha256 for g in state.rng.generators])
    assert digests[0] != digests[1]  # each rank's own generators, not rank 0's twice
    checked = without_torch("validate", checkpoint)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _tampered(root: Path, tmp_path: Path, edit: Callable[[list[dict]], None]) -> Path:
    """The first checkpoint with its per-rank state edited, and its manifest beside it."""
    source = _first_checkpoint(root)
    checkpoint = torch.load(source, weights_only=True)
    edit(checkpoint["callbacks"]["CkptspecCallback"]["ranks"])
    tampered = tmp_path / source.name
    torch.save(checkpoint, tampered)
    shutil.copy(f"{source}.ckptspec.yaml", f"{tampered}.ckptspec.yaml")
    return tampered


def test_a_checkpoint_missing_a_rank_is_caught(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run
    tampered = _tampered(root, tmp_path, lambda ranks: ranks.pop())
    found = [f.message for f in validate(tampered).findings if f.code == "CKS247"]
    assert any("holds the state of 1 of the 2 ranks" in message and "rank 1 missing" in message for message in found), found
    with pytest.raises(RestoreError, match="the manifest records world size 2, the checkpoint holds 1 ranks' state"):
        trainer(tmp_path, CkptspecCallback(), devices=1, enable_checkpointing=False).fit(NoisyModule(), ckpt_path=tampered)


def test_generators_copied_from_another_rank_are_refused(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run

    def copy_rank_zero(ranks: list[dict]) -> None:
        ranks[1]["rng"] = ranks[0]["rng"]

    tampered = _tampered(root, tmp_path, copy_rank_zero)
    callback = CkptspecCallback(allow_resharding=True)
    with pytest.raises(RestoreError, match="rank 1: the random generator states the checkpoint holds for it are rank 0's"):
        trainer(tmp_path, callback, devices=1, enable_checkpointing=False).fit(NoisyModule(), ckpt_path=tampered)


def test_a_rank_data_position_is_checked(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run
    tampered = _tampered(root, tmp_path, lambda ranks: ranks[1]["data_position"].update(global_step=99))
    found = [f.message for f in validate(tampered).findings if f.code == "CKS314"]
    assert any(message.startswith("rank 1: ") and "global_step is 99 in the file" in message for message in found), found


def test_generators_copied_from_another_rank_are_named_without_torch(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    root, _ = ddp_run

    def copy_rank_zero(ranks: list[dict]) -> None:
        ranks[1]["rng"] = ranks[0]["rng"]

    tampered = _tampered(root, tmp_path, copy_rank_zero)
    checked = without_torch("validate", tampered)
    assert checked.returncode == 1
    assert "CKS248" in checked.stdout and "ranks 0, 1 hold the same torch generator state" in checked.stdout, checked.stdout
    untouched = [f for f in validate(_first_checkpoint(root)).findings if f.code == "CKS248"]
    assert untouched == []


def test_a_resume_one_rank_refuses_is_refused_on_every_rank(ddp_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    """Without the ranks sharing their verdicts, rank 0 trains on into the first gradient all-reduce
    and waits there for rank 1, which has stopped: until the process group times out while rank 1's
    process lingers, or, once it is gone (as here), with gloo's "Connection closed by peer", which
    says nothing of why."""
    root, _ = ddp_run
    copy = tmp_path / "run"
    shutil.copytree(root / "checkpoints", copy / "checkpoints")
    record = _first_checkpoint(copy).with_name(f"{_first_checkpoint(copy).name}.next-batches-1.json")
    saved = json.loads(record.read_text())
    saved["batches"][0]["crc32c"] = f"{int(saved['batches'][0]['crc32c'], 16) ^ 1:08x}"  # rank 1 drew other batches after the save
    record.write_text(json.dumps(saved))
    context = mp.start_processes(_lightning_ddp.resume_refused_on_one_rank, args=(str(copy), _free_port()), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 300
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("a rank was left waiting for the others")
    raised = [json.loads((copy / f"refused-rank{rank}.json").read_text()) for rank in range(WORLD)]
    assert raised[1].startswith("RestoreError:") and "data order: the resumed run (rank 1) does not draw the batches" in raised[1]
    assert raised[0].startswith("RestoreError: another rank refused the resume:") and "(rank 1)" in raised[0]
