"""Real DeepSpeed saves on CPU: every spawned process runs `deepspeed.initialize` and
`engine.save_checkpoint` once per ZeRO stage, over gloo.

DeepSpeed's CPU accelerator falls back to gloo when oneCCL is absent. Not exercised: its shared-memory
all-reduce kernel, a C++ op it compiles on first use (minutes, and a compiler); the collectives go
through gloo instead, which changes nothing in what the ranks write.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

STAGES = (0, 1, 2, 3)
TAG = "global_step2"


def save_every_stage(rank: int, world: int, root: str, store: str) -> None:
    """Two AdamW steps of a small model, then `save_checkpoint(<root>/zero<stage>, TAG)`, per stage."""
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    import deepspeed
    import deepspeed.comm

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    deepspeed.comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    try:
        for stage in STAGES:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
            config = {
                "train_micro_batch_size_per_gpu": 4,
                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
                "zero_optimization": {"stage": stage},
            }
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
            torch.manual_seed(1 + rank)
            for _ in range(2):
                engine.backward(engine(torch.randn(4, 8)).square().mean())
                engine.step()
            engine.save_checkpoint(str(Path(root) / f"zero{stage}"), tag=TAG)
            engine.destroy()
    finally:
        torch.distributed.destroy_process_group()
