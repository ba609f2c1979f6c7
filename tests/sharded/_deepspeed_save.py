"""Real DeepSpeed saves on CPU: every spawned process runs `deepspeed.initialize` and
`engine.save_checkpoint` once per ZeRO stage, and once in bf16 (DeepSpeed's bf16 optimizer), over gloo.

DeepSpeed's CPU accelerator falls back to gloo when oneCCL is absent. Not exercised: its shared-memory
all-reduce kernel, a C++ op it compiles on first use (minutes, and a compiler); the collectives go
through gloo instead, which changes nothing in what the ranks write.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

SAVES = {"zero0": (0, False), "zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "bf16-zero1": (1, True)}
"""Save directory name: (ZeRO stage, bf16)."""
TAG = "global_step2"


def save_every_stage(rank: int, world: int, root: str, store: str) -> None:
    """Two AdamW steps of a small model, then `save_checkpoint(<root>/<name>, TAG)`, per entry of `SAVES`."""
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    import deepspeed
    import deepspeed.comm

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    deepspeed.comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    try:
        for name, (stage, bf16) in SAVES.items():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
            config = {
                "train_micro_batch_size_per_gpu": 4,
                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
                "zero_optimization": {"stage": stage},
                "bf16": {"enabled": bf16},
            }
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
            torch.manual_seed(1 + rank)
            for _ in range(2):
                batch = torch.randn(4, 8).to(torch.bfloat16 if bf16 else torch.float32)
                engine.backward(engine(batch).float().square().mean())
                engine.step()
            engine.save_checkpoint(str(Path(root) / name), tag=TAG)
            engine.destroy()
        # Gloo's barrier waits for every collective queued before it, ZeRO's asynchronous ones too: a rank
        # that exits with one still held by a gloo thread aborts ("terminate called without an active exception").
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()
