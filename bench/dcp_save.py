"""What `ckptspec.torch.save_sharded` adds to `torch.distributed.checkpoint.save` at 4 ranks.

    python bench/dcp_save.py [DIRECTORY]

4 spawned ranks (gloo) save 512 MiB of row-sharded DTensors 3 times with each function, alternating:
`dcp.save`, `save_sharded` without a spec (files get SHA-256, the schema's default) and under a spec
whose `integrity.file_digest` is crc32c (the starter spec's). Rank 0 prints each save's wall time,
barrier to barrier.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

RANKS = 4
TENSORS = 8
ROWS, COLUMNS = 4096, 4096  # float32: 64 MiB per tensor
ROUNDS = 3
CRC32C_SPEC = """\
ckptspec: "1.0"
kind: spec
name: bench-sharded
framework: torch
components:
  config: {require: optional}
  optimizer: {require: optional}
  scheduler: {require: optional}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
integrity: {file_digest: crc32c}
"""


def _rank(rank: int, root: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import ckptspec.torch as ckpt

    dist.init_process_group("gloo", init_method=f"file://{root}/store", rank=rank, world_size=RANKS)
    try:
        mesh = init_device_mesh("cpu", (RANKS,))
        generator = torch.Generator().manual_seed(rank)
        state = {
            f"layer{index}.weight": DTensor.from_local(torch.rand(ROWS // RANKS, COLUMNS, generator=generator), mesh, [Shard(0)], run_check=False)
            for index in range(TENSORS)
        }
        spec = Path(root) / f"spec.rank{rank}.yaml"
        spec.write_text(CRC32C_SPEC)
        savers = {"dcp.save": lambda path: dcp.save({"model": state}, checkpoint_id=path),
                  "save_sharded": lambda path: ckpt.save_sharded(path, {"model": state}),
                  "save_sharded-crc32c": lambda path: ckpt.save_sharded(path, {"model": state}, spec=spec)}  # fmt: skip
        for round_ in range(ROUNDS):
            for name, save in savers.items():
                path = Path(root) / f"{name}-{round_}"
                dist.barrier()
                started = time.perf_counter()
                save(path)
                dist.barrier()
                if rank == 0:
                    print(f"{name} {time.perf_counter() - started:.2f} s", flush=True)
                    shutil.rmtree(path)
                dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ckptspec-dcp-save-"))
    root.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank, args=(str(root),), nprocs=RANKS, join=True)
