"""Benchmark: the cost of saving through ckptspec against the framework's own save, same state, same disk.

    python bench/torch_save.py DIR [--runs N]          # everything below
    python bench/torch_save.py DIR --only save|fit
    python bench/torch_save.py DIR --only save --models 76mib transformer

`save`: `ckptspec.torch.save` (checkpoint + manifest, starter spec with the components this state
lacks made optional: CRC32C of every tensor and of the file) against `torch.save` of the same dict,
in process, A and B alternating, for models of 4 large layers (76 MiB, 1 GiB) and a transformer of
184 tensors and 151 modules (66 MiB: each tensor and module has its manifest entry). Each writes a
new file, and overwrites the file of its previous run: right after it was written (its pages still
dirty in the page cache) and once it is on disk (`os.sync()` between runs, outside the timing: a
training run's saves are usually further apart than the kernel's 30 s writeback delay). Wall and
CPU seconds (all threads) of the calls alone, and the CPU seconds of ckptspec's calling thread:
its digests are taken, and its storages written, on other threads, so with a core free for them
the save lasts about what its calling thread spends.

`fit`: `Trainer.fit`, 3 epochs of a ~200 MB model saved by ModelCheckpoint every epoch, with the
CkptspecCallback (starter spec) and without, each a child process timed from start to exit.

Figures are median (min–max); ratios are taken pair by pair. The target is ≤ 1.10 for `save` and
≤ 1.05 for `fit`. On a shared machine read the CPU ratio beside the wall ratio: the wall time of a
save includes the kernel's writeback of earlier saves, which other processes' writes change.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PYTHON = sys.executable
SCRIPT = str(Path(__file__).resolve())
SPEC = "spec.yaml"
RELAXED = ("config", "rng", "data_position", "fingerprint")
"""Components the starter spec requires that a bare model and optimizer (or a bare LightningModule) lack."""


def spread(values: Sequence[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def starter_spec(directory: Path):  # type: ignore[no-untyped-def]
    from ckptspec import load_spec

    path = directory / SPEC
    if not path.exists():
        subprocess.run([PYTHON, "-m", "ckptspec", "init", "-o", str(path)], check=True, stdout=subprocess.DEVNULL)
    spec = load_spec(path)
    relaxed = {name: getattr(spec.components, name).model_copy(update={"require": "optional"}) for name in RELAXED}
    return spec.model_copy(update={"components": spec.components.model_copy(update=relaxed)})


# --- save, in process --------------------------------------------------------------------------------

MODELS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "76mib": ("76 MiB", lambda torch: torch.nn.Sequential(*(torch.nn.Linear(2048, 2048, bias=False) for _ in range(4)))),
    "1gib": ("1 GiB", lambda torch: torch.nn.Sequential(*(torch.nn.Linear(8192, 8192, bias=False) for _ in range(4)))),
    # What models look like: many tensors, many modules, each recorded in the manifest.
    "transformer": ("66 MiB transformer, 184 tensors", lambda torch: torch.nn.Transformer(
        d_model=320, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=1280
    )),
}  # fmt: skip


def timed(call: Callable[[], None]) -> tuple[float, float, float]:
    """Wall, CPU of every thread, and CPU of the calling thread alone."""
    wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - own


def compare(name: str, a: Callable[[int], None], b: Callable[[int], None], runs: int, after: Callable[[], None]) -> None:
    a(-1), b(-1)
    after()
    pairs = []
    for run in range(runs):
        first, second = (a, b) if run % 2 == 0 else (b, a)  # neither always pays for the other's writeback
        x, y = timed(lambda: first(run)), timed(lambda: second(run))
        pairs.append((x, y) if first is a else (y, x))
        after()
    wall = [x[0] / y[0] for x, y in pairs]
    cpu = [x[1] / y[1] for x, y in pairs]
    # The calling thread's CPU against torch.save's (one thread): the save's length when a core is
    # free for the digest and write threads.
    own = [x[2] / y[1] for x, y in pairs]
    print(
        f"{name}\n    ckptspec {spread([x[0] for x, _ in pairs])} s wall, {spread([x[1] for x, _ in pairs])} s CPU,"
        f" {spread([x[2] for x, _ in pairs])} s in the calling thread"
        f" | torch {spread([y[0] for _, y in pairs])} s wall, {spread([y[1] for _, y in pairs])} s CPU"
        f" | ratio wall {spread(wall, 2)}, CPU {spread(cpu, 2)}, calling thread {spread(own, 2)} (target <= 1.10)",
        flush=True,
    )


def bench_save(directory: Path, runs: int, models: Sequence[str]) -> None:
    import torch

    import ckptspec.torch

    spec = starter_spec(directory)
    out = directory / "saves"
    for label, build in (MODELS[name] for name in models):
        model = build(torch)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for fresh, settled in ((True, False), (False, False), (False, True)):
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)

            def name(kind: str, run: int, fresh: bool = fresh) -> Path:
                return out / (f"{kind}-{run}.pt" if fresh else f"{kind}.pt")

            def ours(run: int) -> None:
                ckptspec.torch.save(name("ckptspec", run), model=model, optimizer=optimizer, spec=spec)

            def theirs(run: int) -> None:
                torch.save({"model": model.state_dict(), "optimizers": [optimizer.state_dict()]}, name("torch", run))

            def between_runs(fresh: bool = fresh, settled: bool = settled) -> None:  # outside the timing
                if fresh:  # the disk stays within bounds
                    for path in out.glob("*-*.pt*"):
                        path.unlink()
                if settled:
                    os.sync()

            case = "new file" if fresh else "overwriting a file on disk" if settled else "overwriting the file just written"
            compare(f"save, {label}, {case}", ours, theirs, runs, between_runs)
    shutil.rmtree(out, ignore_errors=True)


# --- fit, whole process ------------------------------------------------------------------------------


def fit_child(directory: str, mode: str) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*(torch.nn.Linear(2048, 2048) for _ in range(12)))  # ~200 MB

        def training_step(self, batch, index):  # type: ignore[no-untyped-def]
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    root = Path(directory) / f"fit-{mode}"
    shutil.rmtree(root, ignore_errors=True)
    callbacks: list[pl.Callback] = [ModelCheckpoint(dirpath=root, save_top_k=-1)]
    if mode == "callback":
        from ckptspec.lightning import CkptspecCallback

        callbacks.append(CkptspecCallback(spec=starter_spec(Path(directory))))
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root, callbacks=callbacks)  # fmt: skip
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(8, 2048)), batch_size=4))
    shutil.rmtree(root, ignore_errors=True)


def child_seconds(command: Sequence[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def bench_fit(directory: Path, runs: int) -> None:
    starter_spec(directory)
    command = [PYTHON, SCRIPT, "_fit", str(directory)]
    pairs = []
    for run in range(runs):
        order = ("callback", "plain") if run % 2 == 0 else ("plain", "callback")
        measured = {mode: child_seconds([*command, mode]) for mode in order}
        pairs.append((measured["callback"], measured["plain"]))
    wall = [x[0] / y[0] for x, y in pairs]
    cpu = [x[1] / y[1] for x, y in pairs]
    print(
        f"Lightning fit, 3 epochs saving a ~200 MB model each, whole process\n"
        f"    with the callback {spread([x[0] for x, _ in pairs], 2)} s wall | without {spread([y[0] for _, y in pairs], 2)} s wall"
        f" | ratio wall {spread(wall, 2)}, CPU {spread(cpu, 2)} (target <= 1.05)",
        flush=True,
    )


def main(arguments: list[str]) -> None:
    if arguments[:1] == ["_fit"]:
        fit_child(*arguments[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", choices=["save", "fit"])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS), help="models for `save` (default: all)")
    options = parser.parse_args(arguments)
    options.directory.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    if options.only in (None, "save"):
        bench_save(options.directory, options.runs, options.models)
    if options.only in (None, "fit"):
        bench_fit(options.directory, options.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
