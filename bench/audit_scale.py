"""Benchmark: audit throughput on many small checkpoints, local process pool vs Dask LocalCluster.

    python bench/audit_scale.py build DIR [COUNT]     # COUNT (default 1000) small torch.save checkpoints + manifests
    python bench/audit_scale.py run DIR               # whole-process wall time of each configuration, 3 runs each

Each checkpoint is a real `torch.save` of a small MLP with its Adam state (~70 KiB) and a manifest
adopted against a spec, i.e. the smallest realistic unit of registry intake. `run` prints, per
configuration, the median wall time over the runs, checkpoints per second, and the per-checkpoint
cost; docs/benchmarks.md records the figures and the capacity plan derived from them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["build", "run"]

SPEC = """\
ckptspec: "1.0"
kind: spec
name: bench-scale
components:
  config: {require: optional}
  scheduler: {require: optional}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
"""
CONFIGURATIONS = {
    "local pool, 1 worker": ["--jobs", "1"],
    "local pool, 2 workers": ["--jobs", "2"],
    "Dask LocalCluster, 1 worker": ["--jobs", "1", "--executor", "dask"],
    "Dask LocalCluster, 2 workers": ["--jobs", "2", "--executor", "dask"],
}


def build(directory: Path, count: int) -> None:
    import shutil

    import torch

    from ckptspec import load_spec
    from ckptspec.adopt import adopt

    spec_path = directory / "spec.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 64)).sum().backward()
    optimizer.step()
    first = directory / "ckpts" / "0000" / "model.pt"
    first.parent.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, first)
    adopt(first, spec)
    for index in range(1, count):
        target = directory / "ckpts" / f"{index:04d}"
        shutil.copytree(first.parent, target)


def run(directory: Path, runs: int = 3) -> None:
    count = sum(1 for _ in (directory / "ckpts").iterdir())
    print(f"{count} checkpoints, {runs} runs per configuration (median wall, whole process)")
    for name, options in CONFIGURATIONS.items():
        command = [sys.executable, "-m", "ckptspec", "audit", str(directory / "ckpts"), "--spec", str(directory / "spec.yaml"),
                   *options, "--format", "json", "-o", str(directory / "report.json")]  # fmt: skip
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            completed = subprocess.run(command, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            if completed.returncode != 0:
                raise SystemExit(f"{name}: exit {completed.returncode}: {completed.stderr[-500:]}")
        wall = statistics.median(walls)
        print(f"{name:<30} {wall:7.2f} s  {count / wall:7.1f} checkpoints/s  {1000 * wall / count:6.2f} ms/checkpoint")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "run"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
    else:
        run(Path(sys.argv[2]))
