"""Benchmark: `ckptspec.torch.save` (checkpoint + manifest) against plain `torch.save` of the same state.

    python bench/torch_save.py ckptspec OUTDIR     # or: torch OUTDIR

Builds a ~1 GiB model of four 8192×8192 linear layers plus an SGD optimizer with momentum buffers
left empty (the state is the weights), saves it once, and prints the in-process seconds of the save
alone. Time each mode as a whole process (e.g. `/usr/bin/time -v`, median of several runs) and
compare; the target is ckptspec ≤ 1.15× torch.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

import ckptspec.torch

__all__ = ["build_model", "main"]

WIDTH = 8192
LAYERS = 4


def build_model() -> torch.nn.Module:
    layers = [torch.nn.utils.skip_init(torch.nn.Linear, WIDTH, WIDTH) for _ in range(LAYERS)]
    with torch.no_grad():
        for layer in layers:
            layer.weight.uniform_(-0.01, 0.01)
            layer.bias.zero_()
    return torch.nn.Sequential(*layers)


def main(mode: str, directory: Path) -> None:
    model = build_model()
    path = directory / f"bench-{mode}.pt"
    # Each run saves a new checkpoint, as ModelCheckpoint does. Replacing an existing file costs
    # both writers more on ext4 (see docs/benchmarks.md), and more for the atomic one.
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    if mode == "ckptspec":
        ckptspec.torch.save(path, model=model)
    elif mode == "torch":
        torch.save({"model": model.state_dict()}, path)
    else:
        raise SystemExit(f"mode must be 'ckptspec' or 'torch', not {mode!r}")
    elapsed = time.perf_counter() - start
    size = path.stat().st_size
    print(f"{mode}: saved {size / 2**30:.2f} GiB in {elapsed:.2f} s")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        main(sys.argv[1], Path(sys.argv[2]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(sys.argv[1] if len(sys.argv) > 1 else "ckptspec", Path(scratch))
