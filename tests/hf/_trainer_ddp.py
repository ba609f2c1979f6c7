"""A real Trainer DDP run (CPU, gloo) in each process `torch.multiprocessing.spawn` starts: the
environment variables torchrun would set make the Trainer join the spawned group."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import torch

from ckptspec import RestoreError
from ckptspec.transformers import CkptspecCallback

from ._tiny import trainer, weights

WORLD = 2


def _join(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD), RANK=str(rank), LOCAL_RANK=str(rank))


def _leave() -> None:
    """End the rank once its results are written, without C++ static destructors (see tests/sharded/_lightning_ddp.py)."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def train_and_resume(rank: int, root: str, port: int) -> None:
    _join(rank, port)
    directory = Path(root)
    options = {"ddp_backend": "gloo", "per_device_train_batch_size": 2}
    straight = trainer(directory / "run", callbacks=[CkptspecCallback()], **options)
    straight.train()
    result: dict[str, object] = {}
    callback = CkptspecCallback()
    resumed = trainer(directory / "resumed", callbacks=[callback], **options)
    resumed.train(resume_from_checkpoint=str(directory / "run" / "checkpoint-8"))
    result["identical"] = all(torch.equal(value, weights(straight)[name]) for name, value in weights(resumed).items())
    result["data_order"] = callback.last_report["data_order"].status if callback.last_report is not None else None
    if rank == 0:
        shutil.copytree(directory / "run" / "checkpoint-8", directory / "damaged" / "checkpoint-8")
        (directory / "damaged" / "checkpoint-8" / "rng_state_1.pth").unlink()
    torch.distributed.barrier()
    refused = trainer(directory / "refused", callbacks=[CkptspecCallback()], **options)
    try:
        refused.train(resume_from_checkpoint=str(directory / "damaged" / "checkpoint-8"))
    except RestoreError as exc:
        result["refused"] = str(exc)
        result["refused_at_step"] = refused.state.global_step
    result["reordered"] = _resume_reordered_on_rank_1(rank, directory, options)
    (directory / f"rank{rank}.json").write_text(json.dumps(result))
    _leave()


def _resume_reordered_on_rank_1(rank: int, directory: Path, options: dict[str, object]) -> str | None:
    """A resume from a copy of checkpoint-8 whose record says rank 1 drew other batches after the
    save: what each rank's `train` raised (the last thing this process group does)."""
    copy = directory / "reordered" / "checkpoint-8"
    if rank == 0:
        shutil.copytree(directory / "run" / "checkpoint-8", copy)
        record = copy / ".ckptspec.next-batches-1.json"
        saved = json.loads(record.read_text())
        saved["batches"][0]["crc32c"] = f"{int(saved['batches'][0]['crc32c'], 16) ^ 1:08x}"
        record.write_text(json.dumps(saved))
    torch.distributed.barrier()
    try:
        # Named in the arguments as a script passes it on, so the callback checks the copy, not the checkpoint it was copied from.
        resumed = trainer(directory / "reordered-run", callbacks=[CkptspecCallback()], resume_from_checkpoint=str(copy), **options)
        resumed.train(resume_from_checkpoint=str(copy))
    except Exception as exc:  # noqa: BLE001 - what each rank raised is the result
        return f"{type(exc).__name__}: {exc}"
    return None
