"""What `ckptspec.torch.save_sharded` adds to `torch.distributed.checkpoint.save`.

    python bench/dcp_save.py [--ranks N] [--rounds R] [--tensors T] [DIRECTORY]

N spawned ranks (gloo; 4 by default) save 512 MiB of row-sharded DTensors (T tensors of 4096
columns, 8 by default: 64 MiB each; more tensors are smaller ones) R times (5) with each
function, alternating: `dcp.save`, `save_sharded` without a spec (files get SHA-256, the schema's
default) and under a spec whose `integrity.file_digest` is crc32c (the starter spec's); each round
starts with the next one, so none always follows the deletion of the one before. Rank 0
prints each save's wall time, barrier to barrier, and the CPU time all ranks spent in it (every
thread), then min / median / max per function and the ratio of each `save_sharded` round to the
`dcp.save` of the same round (the rounds alternate, so both met the same load). On a machine
shared with other work the CPU time is the steadier figure: wall time there measures the load.
Then each step's wall time on rank 0 and CPU time over all ranks, min / median: DCP's `write_data`
(for `save_sharded`, with the digests in the streams), the chunk CRC32Cs taken from the running
values (`inventory`), DCP's `finish` (the commit of `.metadata`) and `save_sharded`'s whole `finish`
(the commit, then the manifest, on rank 0).

Last, the two figures the issue names, each beside the total ratio: the manifest step (rank 0's
`finish` less DCP's commit in it, the only work the gather of the ranks' inventories adds after the
ranks have written) as a share of `dcp.save`'s median wall time, against the target of 5%; and the
digests' CPU time (the CRC32C save's `write_data` less `dcp.save`'s, over all ranks, per round)
beside a bare CRC32C pass over the same bytes in the same processes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

TOTAL_ROWS, COLUMNS = 32768, 4096  # float32: 512 MiB in all
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


def _rank(rank: int, root: str, ranks: int, rounds: int, tensors: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import ckptspec.torch as ckpt
    from ckptspec._crc32c import crc32c

    phases = _timed_phases()
    dist.init_process_group("gloo", init_method=f"file://{root}/store", rank=rank, world_size=ranks)
    try:
        mesh = init_device_mesh("cpu", (ranks,))
        generator = torch.Generator().manual_seed(rank)
        state = {
            f"layer{index}.weight": DTensor.from_local(torch.rand(TOTAL_ROWS // tensors // ranks, COLUMNS, generator=generator), mesh, [Shard(0)], run_check=False)
            for index in range(tensors)
        }
        spec = Path(root) / f"spec.rank{rank}.yaml"
        spec.write_text(CRC32C_SPEC)
        savers = {"dcp.save": lambda path: dcp.save({"model": state}, checkpoint_id=path),
                  "save_sharded": lambda path: ckpt.save_sharded(path, {"model": state}),
                  "save_sharded-crc32c": lambda path: ckpt.save_sharded(path, {"model": state}, spec=spec)}  # fmt: skip
        walls: dict[str, list[float]] = {name: [] for name in savers}
        cpus: dict[str, list[float]] = {name: [] for name in savers}
        phase_times: dict[tuple[str, str], list[float]] = {}
        phase_cpus: dict[tuple[str, str], list[float]] = {}
        bare_crc32c: list[float] = []
        names = list(savers)
        for round_ in range(rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                save = savers[name]
                path = Path(root) / f"{name}-{round_}"
                phases.clear()
                dist.barrier()
                started, cpu_started = time.perf_counter(), time.process_time()
                save(path)
                cpu = time.process_time() - cpu_started
                dist.barrier()
                walls[name].append(time.perf_counter() - started)
                every_rank: list[float] = [0.0] * ranks
                dist.all_gather_object(every_rank, cpu)
                cpus[name].append(sum(every_rank))
                every_rank_phases: list[dict[str, tuple[float, float]]] = [{}] * ranks
                dist.all_gather_object(every_rank_phases, dict(phases))
                for phase, (seconds, _) in phases.items():
                    phase_times.setdefault((name, phase), []).append(seconds)
                    phase_cpus.setdefault((name, phase), []).append(sum(spent[phase][1] for spent in every_rank_phases if phase in spent))
                if rank == 0:
                    print(f"round {round_} {name}: wall {walls[name][-1]:.2f} s, cpu {cpus[name][-1]:.2f} s", flush=True)
                    shutil.rmtree(path)
                dist.barrier()
            cpu_started = time.process_time()
            for tensor in state.values():
                crc32c(memoryview(tensor.to_local().numpy()).cast("B"))
            every_rank = [0.0] * ranks
            dist.all_gather_object(every_rank, time.process_time() - cpu_started)
            bare_crc32c.append(sum(every_rank))
        if rank == 0:
            _summary("wall", walls, ranks)
            _summary("cpu", cpus, ranks)
            for (name, phase), seconds in phase_times.items():
                cpu = phase_cpus[(name, phase)]
                print(f"{ranks} ranks {name} {phase}: rank 0 wall min {min(seconds):.3f} median {statistics.median(seconds):.3f} s; "
                      f"cpu all ranks min {min(cpu):.3f} median {statistics.median(cpu):.3f} s", flush=True)  # fmt: skip
            _issue_figures(walls, cpus, phase_times, phase_cpus, bare_crc32c, ranks)
    finally:
        dist.destroy_process_group()


def _timed_phases() -> dict[str, tuple[float, float]]:
    """Wall and CPU time (this process, every thread) spent in the writers' steps during the current
    save, by step, filled as they run."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    from ckptspec.adapters._torch_distributed import _InventoryWriter

    spent: dict[str, tuple[float, float]] = {}
    steps = [(FileSystemWriter, "write_data", "write_data"), (FileSystemWriter, "finish", "DCP finish"),
             (_InventoryWriter, "_inventoried", "inventory"), (_InventoryWriter, "finish", "save_sharded finish")]  # fmt: skip
    for owner, method, phase in steps:
        original = getattr(owner, method)

        def timed(self: object, *args: object, _original=original, _phase=phase, **kwargs: object) -> object:  # type: ignore[no-untyped-def]
            started, cpu_started = time.perf_counter(), time.process_time()
            try:
                return _original(self, *args, **kwargs)
            finally:
                wall, cpu = spent.get(_phase, (0.0, 0.0))
                spent[_phase] = (wall + time.perf_counter() - started, cpu + time.process_time() - cpu_started)

        setattr(owner, method, timed)
    return spent


def _summary(what: str, times: dict[str, list[float]], ranks: int) -> None:
    baseline = times["dcp.save"]
    for name, seconds in times.items():
        line = f"{ranks} ranks {what} {name}: min {min(seconds):.2f} median {statistics.median(seconds):.2f} max {max(seconds):.2f} s"
        if name != "dcp.save":
            ratios = [mine / base for mine, base in zip(seconds, baseline)]
            line += f"; ratio to dcp.save per round: min {min(ratios):.3f} median {statistics.median(ratios):.3f} max {max(ratios):.3f}"
        print(line, flush=True)


def _issue_figures(
    walls: dict[str, list[float]],
    cpus: dict[str, list[float]],
    phase_times: dict[tuple[str, str], list[float]],
    phase_cpus: dict[tuple[str, str], list[float]],
    bare_crc32c: list[float],
    ranks: int,
) -> None:
    """The manifest step's share of `dcp.save`, the digests' CPU time, and the total ratio they sit in."""
    name = "save_sharded-crc32c"
    manifest = [whole - commit for whole, commit in zip(phase_times[(name, "save_sharded finish")], phase_times[(name, "DCP finish")])]
    median, fastest = statistics.median(walls["dcp.save"]), min(walls["dcp.save"])
    print(f"{ranks} ranks issue figure, manifest step (rank 0's finish after DCP's commit), {name}: min {min(manifest):.3f} "
          f"median {statistics.median(manifest):.3f} s = {100 * statistics.median(manifest) / median:.1f}% of dcp.save's median "
          f"wall {median:.3f} s, {100 * statistics.median(manifest) / fastest:.1f}% of its fastest {fastest:.3f} s "
          "(target: at most 5%)", flush=True)  # fmt: skip
    mine, base = phase_cpus[(name, "write_data")], phase_cpus[("dcp.save", "write_data")]
    digests = [with_digests - plain for with_digests, plain in zip(mine, base)]
    inventory = phase_cpus[(name, "inventory")]
    print(f"{ranks} ranks issue figure, digest cpu (all ranks): write_data of {name} less dcp.save's, per round median "
          f"{statistics.median(digests):.3f} s, between the minima {min(mine) - min(base):.3f} s; plus the chunk inventory median "
          f"{statistics.median(inventory):.3f} s (min {min(inventory):.3f}); a bare CRC32C pass over the same bytes median "
          f"{statistics.median(bare_crc32c):.3f} s (min {min(bare_crc32c):.3f})", flush=True)  # fmt: skip
    total = [mine - base for mine, base in zip(cpus[name], cpus["dcp.save"])]
    ratios = [mine / base for mine, base in zip(walls[name], walls["dcp.save"])]
    print(f"{ranks} ranks issue figure, in all: {name} less dcp.save, cpu median {statistics.median(total):.3f} s per round; "
          f"wall ratio per round median {statistics.median(ratios):.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=8)
    arguments = parser.parse_args()
    root = arguments.directory or Path(tempfile.mkdtemp(prefix="ckptspec-dcp-save-"))
    root.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank, args=(str(root), arguments.ranks, arguments.rounds, arguments.tensors), nprocs=arguments.ranks, join=True)
