"""Whole-process benchmark of the legacy torch, TorchScript and safetensors readers, ~1 GiB and more.

    python bench/torch_formats.py [GIB ...]          # write files of each size if absent, time every mode
    python bench/torch_formats.py FORMAT MODE PATH   # one process of one mode (for /usr/bin/time -v)
    python bench/torch_formats.py write FORMAT GIB PATH

Formats: legacy (`torch.save(..., _use_new_zipfile_serialization=False)`), torchscript
(`torch.jit.save` of a scripted module), safetensors (`safetensors.torch.save_file`).
Modes:
    inspect     ckptspec: read the structure and summarise it (no tensor bytes)
    load        the framework's own reader: torch.load(weights_only=True) for legacy (mmap=True needs a
                zip archive), torch.jit.load for TorchScript, safe_open + get_tensor of every tensor
    crc         ckptspec: TensorRef.crc32c() of every tensor
    raw-crc     crc32c.crc32c over the same byte ranges, sliced straight from an mmap of the file

Each figure is a whole process (interpreter start and imports included), the median of `RUNS` runs,
with peak resident memory from the kernel's per-child accounting (`os.wait4`). Files are written
under the system temporary directory and removed at the end.
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

FORMATS = ("legacy", "torchscript", "safetensors")
MODES = ("inspect", "load", "crc", "raw-crc")
RUNS = 3
_LAYERS = 32


def _model(gib: float):  # type: ignore[no-untyped-def]
    """`_LAYERS` square linear layers, as wide as the size asks: the tensor count stays the same from
    one size to the next, so a difference in memory is the bytes' doing, not the structure's."""
    import torch

    torch.manual_seed(0)
    width = round((gib * 2**30 / (_LAYERS * 4)) ** 0.5)
    return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(_LAYERS)))


def write(fmt: str, path: Path, gib: float) -> None:
    import torch

    model = _model(gib)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "legacy":
        torch.save(model.state_dict(), path, _use_new_zipfile_serialization=False)
    elif fmt == "torchscript":
        torch.jit.save(torch.jit.script(model), path)
    else:
        from safetensors.torch import save_file

        save_file(model.state_dict(), path)


def _open(fmt: str, path: Path):  # type: ignore[no-untyped-def]
    if fmt == "legacy":
        from ckptspec.formats.legacy_torch import open_legacy_checkpoint

        return open_legacy_checkpoint(path)
    if fmt == "torchscript":
        from ckptspec.formats.torchscript import open_torchscript

        return open_torchscript(path)
    from ckptspec.formats.safetensors import open_safetensors

    return open_safetensors(path)


def run_mode(fmt: str, mode: str, path: Path) -> None:
    if mode == "inspect":
        from ckptspec.formats.inspect import inspect_checkpoint

        inspection = inspect_checkpoint(path)
        print(len(inspection.tensors), sum(t.nbytes for t in inspection.tensors))
    elif mode == "load":
        _framework_load(fmt, path)
    elif mode == "crc":
        with _open(fmt, path) as checkpoint:
            _report([(t.nbytes, t.crc32c) for _, t in checkpoint.tensors()])
    elif mode == "raw-crc":
        _raw_crc(fmt, path)
    else:
        raise SystemExit(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def _framework_load(fmt: str, path: Path) -> None:
    import torch

    if fmt == "legacy":
        print(len(torch.load(path, weights_only=True)))
    elif fmt == "torchscript":
        print(len(torch.jit.load(path).state_dict()))
    else:
        from safetensors import safe_open

        with safe_open(path, "pt") as handle:
            print(sum(handle.get_tensor(key).numel() for key in handle.keys()))


def _raw_crc(fmt: str, path: Path) -> None:
    import crc32c

    with _open(fmt, path) as checkpoint:
        ranges = [t.byte_range for _, t in checkpoint.tensors()]
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        _report([(end - start, lambda s=start, e=end: crc32c.crc32c(view[s:e])) for start, end in ranges])
        view.release()


def _report(jobs: list) -> None:  # type: ignore[type-arg]
    started = time.perf_counter()
    for _, job in jobs:
        job()
    seconds = time.perf_counter() - started
    total = sum(size for size, _ in jobs)
    print(f"{total / 2**30:.2f} GiB in {seconds:.3f} s = {total / 2**30 / seconds:.2f} GiB/s (in-process)")


def _time_process(fmt: str, mode: str, path: Path) -> tuple[float, float]:
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, fmt, mode, str(path)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{fmt} {mode} failed")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def compare(sizes: list[float]) -> None:
    directory = Path(tempfile.mkdtemp(prefix="ckptspec-formats-"))
    try:
        for gib in sizes:
            for fmt in FORMATS:
                path = directory / f"{fmt}-{gib}gib.bin"
                # Written by a child: a forked child starts with its parent's peak RSS, so the parent stays small.
                subprocess.run([sys.executable, __file__, "write", fmt, str(gib), str(path)], check=True)
                _compare_one(fmt, path, gib)
                path.unlink()
    finally:
        for leftover in directory.iterdir():
            leftover.unlink()
        directory.rmdir()


def _compare_one(fmt: str, path: Path, gib: float) -> None:
    # Beyond the first size, only memory flatness is measured: the framework load is left out.
    modes = MODES if gib == 1 else ("inspect", "crc")
    print(f"{fmt} {path.stat().st_size / 2**30:.2f} GiB; whole-process, median of {RUNS} runs")
    medians = {}
    for mode in modes:
        _time_process(fmt, mode, path)  # warm-up: page cache and .pyc files
        samples = [_time_process(fmt, mode, path) for _ in range(RUNS)]
        medians[mode] = statistics.median(s[0] for s in samples)
        print(f"  {mode:>8}: wall {medians[mode]:.3f} s, peak RSS {statistics.median(s[1] for s in samples):.0f} MiB")
    if "load" in medians:
        print(f"  inspect / load wall: {medians['inspect'] / medians['load']:.3f}; crc / raw-crc wall: {medians['crc'] / medians['raw-crc']:.3f}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if len(arguments) == 3 and arguments[0] in FORMATS:
        run_mode(arguments[0], arguments[1], Path(arguments[2]))
    elif arguments[:1] == ["write"]:
        write(arguments[1], Path(arguments[3]), float(arguments[2]))
    else:
        compare([float(a) for a in arguments] or [1.0, 4.0])
