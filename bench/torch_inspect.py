"""Whole-process benchmark of the torch reader against torch.load, on a ~1 GiB checkpoint.

    python bench/torch_inspect.py              # write the checkpoint if absent, time every mode 5 times
    python bench/torch_inspect.py MODE [PATH]  # one process of one mode (for /usr/bin/time -v)

Modes:
    inspect     ckptspec: open the archive, read data.pkl with the restricted unpickler, summarise it
    torch-load  torch.load(PATH, mmap=True, weights_only=True)
    crc         ckptspec: TensorRef.crc32c() of every tensor
    raw-crc     crc32c.crc32c over the same byte ranges, sliced straight from an mmap of the file

Each timed figure is a whole process (interpreter start and imports included), the median of 5 runs,
with peak resident memory from the kernel's per-child accounting (`os.wait4`).
"""

from __future__ import annotations

import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_PATH = Path(tempfile.gettempdir()) / "ckptspec-bench" / "lightning-1gib.ckpt"
MODES = ("inspect", "torch-load", "crc", "raw-crc")
RUNS = 5


def write_checkpoint(path: Path, layers: int = 38, width: int = 1536) -> None:
    """A Lightning-shaped checkpoint: a model of `layers` square linear layers and its Adam state."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "epoch": 1, "global_step": 100, "pytorch-lightning_version": "2.6.6",
        "state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
    }  # fmt: skip
    with path.open("wb") as handle:
        torch.save(checkpoint, handle)


def run_mode(mode: str, path: Path) -> None:
    if mode == "inspect":
        from ckptspec.formats.torchzip import inspect_torch_checkpoint

        inspection = inspect_torch_checkpoint(path)
        print(len(inspection.tensors), sum(t.nbytes for t in inspection.tensors))
    elif mode == "torch-load":
        import torch

        checkpoint = torch.load(path, mmap=True, weights_only=True)
        print(len(checkpoint["state_dict"]))
    elif mode == "crc":
        from ckptspec.formats.torchzip import open_torch_checkpoint

        with open_torch_checkpoint(path) as checkpoint:
            _report_throughput([(t.nbytes, t.crc32c) for _, t in checkpoint.tensors()])
    elif mode == "raw-crc":
        _raw_crc(path)
    else:
        raise SystemExit(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def _raw_crc(path: Path) -> None:
    import crc32c

    from ckptspec.formats.torchzip import open_torch_checkpoint

    with open_torch_checkpoint(path) as checkpoint:
        ranges = [t.byte_range for _, t in checkpoint.tensors()]
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        _report_throughput([(end - start, lambda s=start, e=end: crc32c.crc32c(view[s:e])) for start, end in ranges])
        view.release()


def _report_throughput(jobs: list) -> None:
    started = time.perf_counter()
    for _, job in jobs:
        job()
    seconds = time.perf_counter() - started
    total = sum(size for size, _ in jobs)
    print(f"{total / 2**30:.2f} GiB in {seconds:.3f} s = {total / 2**30 / seconds:.2f} GiB/s (in-process)")


def _time_process(mode: str, path: Path) -> tuple[float, float]:
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, mode, str(path)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{mode} failed with exit code {child.returncode}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def compare(path: Path) -> None:
    if not path.exists():
        print(f"writing {path} ...")
        write_checkpoint(path)
    print(f"{path}: {path.stat().st_size / 2**30:.2f} GiB; whole-process figures, median of {RUNS} runs")
    medians = {}
    for mode in MODES:
        _time_process(mode, path)  # warm-up: page cache and .pyc files
        samples = [_time_process(mode, path) for _ in range(RUNS)]
        medians[mode] = statistics.median(s[0] for s in samples)
        peak = statistics.median(s[1] for s in samples)
        print(f"{mode:>10}: wall {medians[mode]:.3f} s, peak RSS {peak:.0f} MiB")
    print(f"inspect / torch-load wall: {medians['inspect'] / medians['torch-load']:.3f}")
    print(f"crc / raw-crc wall: {medians['crc'] / medians['raw-crc']:.3f}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments and arguments[0] in MODES:
        run_mode(arguments[0], Path(arguments[1]) if len(arguments) > 1 else DEFAULT_PATH)
    else:
        compare(Path(arguments[0]) if arguments else DEFAULT_PATH)
