"""Benchmark: `ckptspec lineage` over a run of many checkpoints, and its memory as the run grows.

    python bench/lineage.py build DIR --saves 2000   # one real run: a save at every step (needs torch)
    python bench/lineage.py run DIR                  # time and peak memory of the first 250 … 2000

`build` trains a small model with Adam, a StepLR and a data position and saves it with
`ckptspec.torch.save` at every step, resuming from the newest checkpoint every 100 steps, so every
manifest records its run and parent. `run` judges the first N checkpoints (N = 250, 500, 1000,
2000, each in a fresh process), reports the wall time of `judge_run` (median of 5) and the peak of
Python allocations during it (tracemalloc), and the same for `audit` over the same files as the
side-by-side baseline. The peak per checkpoint staying level as N doubles is what "memory flat
beyond the graph" means: the graph holds one small record per checkpoint and nothing else grows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

__all__ = ["build", "measure"]

SIZES = (250, 500, 1000, 2000)


def build(directory: Path, saves: int) -> None:
    import torch

    import ckptspec.torch as ckpt

    directory.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1))
    position = ckpt.DataPosition()
    for step in range(1, saves + 1):
        if step % 100 == 1:  # a new process resumes from the newest save
            model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1))
            optimizer = torch.optim.Adam(model.parameters())
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 50)
            position = ckpt.DataPosition()
            if step > 1:
                ckpt.restore(directory / f"step-{step - 1:05d}.pt", model=model, optimizer=optimizer, scheduler=scheduler, data_position=position)
        loss = model(torch.randn(4, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        position.global_step += 1
        position.samples_seen += 4
        ckpt.save(directory / f"step-{step:05d}.pt", model=model, optimizer=optimizer, scheduler=scheduler, data_position=position)


def measure(directory: Path, count: int, command: str) -> dict[str, float]:
    """In this process: judge the first `count` checkpoints of `directory` (via a folder of links)."""
    subset = directory.parent / f"{directory.name}-first-{count}"
    if not subset.exists():
        subset.mkdir()
        for checkpoint in sorted(directory.glob("step-*.pt"))[:count]:
            for path in (checkpoint, checkpoint.with_name(checkpoint.name + ".ckptspec.yaml")):
                (subset / path.name).symlink_to(path.resolve())
    if command == "lineage":
        from ckptspec.lineage import judge_run

        def work() -> int:
            return judge_run([subset]).exit_code
    else:
        from ckptspec import audit

        def work() -> int:
            return audit([subset]).exit_code

    times = []
    for _ in range(5):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    work()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"seconds": statistics.median(times), "peak_mib": peak / 2**20, "peak_kib_per_checkpoint": peak / 1024 / count}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["build", "run", "_one"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--saves", type=int, default=2000)
    parser.add_argument("--count", type=int)
    parser.add_argument("--command", default="lineage")
    options = parser.parse_args()
    if options.action == "build":
        build(options.directory, options.saves)
    elif options.action == "_one":
        print(json.dumps(measure(options.directory, options.count, options.command)))
    else:
        for count in SIZES:
            row = {}
            for command in ("lineage", "audit"):
                done = subprocess.run(
                    [sys.executable, __file__, "_one", str(options.directory), "--count", str(count), "--command", command],
                    check=True, capture_output=True, text=True,
                )
                row[command] = json.loads(done.stdout.strip().splitlines()[-1])
            print(count, json.dumps(row))


if __name__ == "__main__":
    main()
