"""Every speed and memory target of ckptspec, side by side with its baseline on the same files.

    python bench/speed.py build DIR                # write the files (needs torch, lightning, tensorflow)
    python bench/speed.py build DIR scanners       # only the files of the `scanners` target (torch alone)
    python bench/speed.py build DIR jobs           # only those of `scanners` and `jobs` (about 1 GiB)
    python bench/speed.py run DIR [--runs N] [TARGET ...]
    python bench/speed.py run DIR audit-instructions   # per-checkpoint instructions of audit (valgrind)
    rm -r DIR                                      # the files take about 8 GiB

Whole-process figures run the two commands in turn (A B A B ...), each as a child process timed
with `time.perf_counter` from start to exit, its CPU time (user + system, all threads) and peak
resident memory from the kernel's accounting of the child (`os.wait4`); ratios are taken pair by
pair and printed as median (min-max). In-process figures time the calls alone inside one process,
alternating the same way. Quote medians: on a shared machine one slow run moves the mean, not the
median; and read CPU where the load average (printed with each target) exceeds the cores, which
stretches wall times but hardly CPU times. Run with bytecode caching on (not under
PYTHONDONTWRITEBYTECODE), from a directory where `ckptspec` resolves to the tree to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PYTHON = sys.executable
SCRIPT = str(Path(__file__).resolve())
CKPTSPEC = [PYTHON, "-m", "ckptspec"]
STARTER_SPEC = "spec.yaml"
MiB = 1 << 20


# --- building the files ---------------------------------------------------------------------------


def build(directory: Path, only: Sequence[str] = ()) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _run(CKPTSPEC + ["init", "--force", "-o", str(directory / STARTER_SPEC)])
    _scanner_files(directory)
    _jobs_files(directory)
    if only and set(only) <= {"scanners", "jobs"}:
        return
    for name, layers in (("lightning-1g.ckpt", 38), ("lightning-4g.ckpt", 152)):
        _lightning_shaped(directory / name, layers)
    for shards in (1, 4):
        _run([PYTHON, SCRIPT, "_tf", str(directory / f"tf-{shards}"), str(shards)])
    _registry(directory / "registry")
    (directory / "small").mkdir(exist_ok=True)
    _lightning_shaped(directory / "small" / "small.ckpt", 1, width=64)
    for checkpoint in [directory / "lightning-1g.ckpt", directory / "lightning-4g.ckpt", directory / "small" / "small.ckpt",
                       directory / "tf-1" / "ckpt", directory / "tf-4" / "ckpt"]:  # fmt: skip
        _run(CKPTSPEC + ["manifest", "--force", "--spec", str(directory / STARTER_SPEC), str(checkpoint)])


def _lightning_shaped(path: Path, layers: int, width: int = 1536) -> None:
    """A checkpoint laid out as Lightning's: the model, then Adam's two moments per parameter."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    state = {
        "epoch": 1, "global_step": 100, "pytorch-lightning_version": "2.6.6",
        "state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
    }  # fmt: skip
    torch.save(state, path)


SMALL_COUNT = 200


def _scanner_files(directory: Path) -> None:
    """What the scanners a registry could pick instead judge side by side with ckptspec: a Lightning-shaped
    checkpoint of about 1 MB with its manifest, and a directory of 200 torch checkpoints of about 1 MB,
    each with its manifest (`small-200`) and without (`small-200-bare`, the same files linked)."""
    import torch

    from ckptspec import load_spec
    from ckptspec.adopt import adopt

    one = directory / "mb1" / "lightning-1m.ckpt"
    one.parent.mkdir(exist_ok=True)
    _lightning_shaped(one, 1, width=300)
    _run(CKPTSPEC + ["manifest", "--force", "--spec", str(directory / STARTER_SPEC), str(one)])
    spec = load_spec(directory / STARTER_SPEC)
    spec = spec.model_copy(update={"components": spec.components.model_copy(update={
        name: getattr(spec.components, name).model_copy(update={"require": "optional"})
        for name in ("config", "rng", "data_position", "fingerprint")
    })})  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(192, 192), torch.nn.Linear(192, 192))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 192)).sum().backward()
    optimizer.step()
    with_manifests, bare = directory / "small-200", directory / "small-200-bare"
    for index in range(SMALL_COUNT):
        path = with_manifests / f"run-{index:03d}" / "model.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        adopt(path, spec, force=True)
        (bare / path.parent.name).mkdir(parents=True, exist_ok=True)
        if not (bare / path.parent.name / path.name).exists():
            os.link(path, bare / path.parent.name / path.name)


def _jobs_files(directory: Path, copies: int = 5) -> None:
    """`small-1000-bare`: copies of the 200 bare checkpoints (copies, not links: a file found under
    two names is one checkpoint)."""
    source, target = directory / "small-200-bare", directory / f"small-{copies * SMALL_COUNT}-bare"
    for copy in range(copies):
        for checkpoint in sorted(source.glob("*/model.pt")):
            path = target / f"{copy}-{checkpoint.parent.name}" / checkpoint.name
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(checkpoint, path)


def _tf_bundle(directory: str, shards: str) -> None:
    """A 1 GiB bundle: 64 variables of 16 MiB, in `shards` data files."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    variables = {f"v{index:02d}": tf.Variable(tf.random.stateless_uniform([4 << 20], seed=[index, 0])) for index in range(64)}
    per_shard = (64 // int(shards)) * 16 * MiB + MiB  # whole variables, a little room for the rest
    policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=per_shard)
    options = tf.train.CheckpointOptions(experimental_sharding_callback=policy)
    tf.train.Checkpoint(**variables).write(os.path.join(directory, "ckpt"), options=options)


def _registry(directory: Path, count: int = 50) -> None:
    """`count` torch.save files of about 39 MB (two 1280 × 1280 layers and their Adam moments), each with a manifest (the audit corpus)."""
    import torch

    from ckptspec import load_spec
    from ckptspec.adopt import adopt

    directory.mkdir(parents=True, exist_ok=True)
    (directory.parent / "registry-spec.yaml").write_text(
        'ckptspec: "1.0"\nkind: spec\nname: registry\nframework: torch\n'
        "components:\n  config: {require: optional}\n  rng: {require: optional}\n"
        "  data_position: {require: optional}\n  fingerprint: {require: optional}\n"
        "integrity: {file_digest: crc32c}\n"
    )
    spec = load_spec(directory.parent / "registry-spec.yaml")
    model = torch.nn.Sequential(torch.nn.Linear(1280, 1280), torch.nn.Linear(1280, 1280))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 1280)).sum().backward()
    optimizer.step()
    for index in range(count):
        path = directory / f"run-{index:02d}" / "model.pt"
        path.parent.mkdir(exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        adopt(path, spec, force=True)


def _run(command: Sequence[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


# --- baselines run as child processes --------------------------------------------------------------


def bare_crc(paths: Sequence[str]) -> None:
    """The hardware limit: read every byte once into one 8 MiB buffer and CRC32C it."""
    import crc32c

    buffer = bytearray(8 * MiB)
    view = memoryview(buffer)
    value = total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                value = crc32c.crc32c(view[:count], value)
                total += count
    print(total, value)


def torch_load(path: str) -> None:
    import torch

    print(len(torch.load(path, mmap=True, weights_only=True)))


# --- measuring -------------------------------------------------------------------------------------


def measure(command: Sequence[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak resident MiB of one child process running `command`."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):  # validate exits 1 on findings; the time is what matters
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def spread(values: Sequence[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def load() -> str:
    return "load average " + " ".join(f"{value:.1f}" for value in os.getloadavg())


def pair(name: str, a: Sequence[str], b: Sequence[str], runs: int, target: str) -> None:
    measure(a), measure(b)  # warm the page cache and the bytecode cache
    before = load()
    pairs = [(measure(a), measure(b)) for _ in range(runs)]
    walls_a, walls_b = [x[0] for x, _ in pairs], [y[0] for _, y in pairs]
    cpus_a, cpus_b = [x[1] for x, _ in pairs], [y[1] for _, y in pairs]
    peak_a, peak_b = max(x[2] for x, _ in pairs), max(y[2] for _, y in pairs)
    print(
        f"{name}\n    A {spread(walls_a)} s, CPU {spread(cpus_a)} s, peak {peak_a:.0f} MiB"
        f" | B {spread(walls_b)} s, CPU {spread(cpus_b)} s, peak {peak_b:.0f} MiB"
        f"\n    A/B wall {spread([x[0] / y[0] for x, y in pairs], 2)}, CPU {spread([x[1] / y[1] for x, y in pairs], 2)}"
        f" (target {target}; {before}, after: {load()})",
        flush=True,
    )


def alone(name: str, command: Sequence[str], runs: int, target: str) -> None:
    measure(command)
    before = load()
    results = [measure(command) for _ in range(runs)]
    print(
        f"{name}\n    {spread([r[0] for r in results])} s, CPU {spread([r[1] for r in results])} s,"
        f" peak {max(r[2] for r in results):.0f} MiB (target {target}; {before}, after: {load()})",
        flush=True,
    )


def instructions(name: str, command: Sequence[str]) -> None:
    """User-space instructions of one run under callgrind: slow (about 30x), but the same however
    busy the machine is, where wall and CPU times are not. Skipped without valgrind."""
    if shutil.which("valgrind") is None:
        return
    measure(command)  # the bytecode cache
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command], capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    print(f"{name}: {int(found.group(1)) / 1e6:,.0f} M instructions" if found else f"{name}: valgrind counted nothing", flush=True)


def in_process(name: str, a: Callable[[], None], b: Callable[[], None], runs: int, target: str) -> None:
    a(), b()
    pairs = []
    for _ in range(runs):
        start = time.perf_counter()
        a()
        middle = time.perf_counter()
        b()
        pairs.append((middle - start, time.perf_counter() - middle))
    ratios = [x / y for x, y in pairs]
    print(
        f"{name}\n    A {spread([x for x, _ in pairs])} s | B {spread([y for _, y in pairs])} s"
        f" | A/B {spread(ratios, 2)} (target {target})",
        flush=True,
    )


# --- the targets -----------------------------------------------------------------------------------


def target_validate(directory: Path, runs: int) -> None:
    for label, checkpoint, files in (
        ("Lightning 1 GiB", directory / "lightning-1g.ckpt", [directory / "lightning-1g.ckpt"]),
        ("Lightning 4 GiB", directory / "lightning-4g.ckpt", [directory / "lightning-4g.ckpt"]),
        ("TF bundle 1 GiB, 1 shard", directory / "tf-1" / "ckpt", sorted((directory / "tf-1").glob("ckpt.*"))),
        ("TF bundle 1 GiB, 4 shards", directory / "tf-4" / "ckpt", sorted((directory / "tf-4").glob("ckpt.*"))),
    ):
        bare = [PYTHON, SCRIPT, "_bare", *(str(path) for path in files if not path.name.endswith(".yaml"))]
        pair(f"validate, starter spec: {label} (A) vs read + CRC32C of the same bytes (B)",
             CKPTSPEC + ["validate", str(checkpoint)], bare, runs, "<= 1.5")  # fmt: skip


def target_inspect(directory: Path, runs: int) -> None:
    checkpoint = str(directory / "lightning-1g.ckpt")
    for size in ("1g", "4g"):
        path = str(directory / f"lightning-{size}.ckpt")
        alone(f"inspect --format json, Lightning {size.upper()}iB", CKPTSPEC + ["inspect", "--format", "json", path], runs, "peak <= 64 MiB, flat")
    pair("inspect --format json (A) vs torch.load(mmap=True, weights_only=True) (B), 1 GiB",
         CKPTSPEC + ["inspect", "--format", "json", checkpoint], [PYTHON, SCRIPT, "_torch_load", checkpoint], runs, "<= 0.10")  # fmt: skip
    _run_shown([PYTHON, SCRIPT, "_inspect_in_process", checkpoint, str(runs)])


def inspect_in_process(path: str, runs: str) -> None:
    import torch

    from ckptspec import inspect_checkpoint

    in_process("inspect to JSON (A) vs torch.load(mmap=True, weights_only=True) (B), in process, 1 GiB",
               lambda: json.dumps(inspect_checkpoint(Path(path)).to_json(include_tensors=False)), lambda: torch.load(path, mmap=True, weights_only=True), int(runs), "<= 1")  # fmt: skip


def save_in_process(directory: str, runs: str) -> None:
    """ckptspec.torch.save with the starter spec against torch.save, fresh files and overwrites."""
    import torch

    import ckptspec.torch
    from ckptspec import load_spec

    spec = load_spec(Path(directory) / STARTER_SPEC)
    spec = spec.model_copy(update={"components": spec.components.model_copy(update={
        name: getattr(spec.components, name).model_copy(update={"require": "optional"})
        for name in ("config", "rng", "data_position", "fingerprint")
    })})  # fmt: skip
    for label, width, layers in (("76 MiB", 2048, 4), ("1 GiB", 8192, 4)):
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(layers)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        counter = iter(range(1 << 30))
        out = Path(directory) / "saves"
        out.mkdir(exist_ok=True)

        def ours(fresh: bool) -> None:
            path = out / (f"ours-{next(counter)}.pt" if fresh else "ours.pt")
            ckptspec.torch.save(path, model=model, optimizer=optimizer, spec=spec)

        def theirs(fresh: bool) -> None:
            path = out / (f"torch-{next(counter)}.pt" if fresh else "torch.pt")
            torch.save({"model": model.state_dict(), "optimizers": [optimizer.state_dict()]}, path)

        for fresh in (True, False):
            in_process(f"ckptspec.torch.save, starter spec (A) vs torch.save (B), {label}, {'new file' if fresh else 'overwrite'}",
                       lambda: ours(fresh), lambda: theirs(fresh), int(runs), "<= 1.10")  # fmt: skip
            for path in out.iterdir():
                path.unlink()


def target_save(directory: Path, runs: int) -> None:
    _run_shown([PYTHON, SCRIPT, "_save_in_process", str(directory), str(runs)])
    _run_shown([PYTHON, SCRIPT, "_lightning_save", str(directory), str(runs)])
    fit = [PYTHON, SCRIPT, "_fit", str(directory)]
    pair("Lightning fit, 3 epochs saving a 200 MB model each: with CkptspecCallback, starter spec (A) vs without (B)",
         [*fit, "callback"], [*fit, "plain"], runs, "<= 1.05")  # fmt: skip


def _lightning_module(width: int, layers: int):  # type: ignore[no-untyped-def]
    import lightning.pytorch as pl
    import torch

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))

        def training_step(self, batch, index):  # type: ignore[no-untyped-def]
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    return Model()


def _trainer(directory: Path, callbacks: list, epochs: int = 1):  # type: ignore[no-untyped-def]
    import lightning.pytorch as pl

    return pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=directory, callbacks=callbacks)  # fmt: skip


def _loader():  # type: ignore[no-untyped-def]
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(8, 2048)), batch_size=4)


def _relaxed_starter_spec(directory: Path):  # type: ignore[no-untyped-def]
    from ckptspec import load_spec

    spec = load_spec(directory / STARTER_SPEC)
    relaxed = {name: getattr(spec.components, name).model_copy(update={"require": "optional"}) for name in ("config", "fingerprint")}
    return spec.model_copy(update={"components": spec.components.model_copy(update=relaxed)})


def lightning_save(directory: str, runs: str) -> None:
    """trainer.save_checkpoint of a 76 MB model, with the callback and the starter spec vs without."""
    import logging
    import warnings

    from ckptspec.lightning import CkptspecCallback

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    base = Path(directory) / "lightning-save"
    trainers = {}
    for name, callbacks in (("ours", [CkptspecCallback(spec=_relaxed_starter_spec(Path(directory)))]), ("plain", [])):
        trainer = _trainer(base / name, callbacks)
        trainer.fit(_lightning_module(2048, 4), _loader())  # ~76 MB of weights and momentum-free SGD state
        trainers[name] = trainer
    counter = iter(range(1 << 30))
    in_process("trainer.save_checkpoint, 76 MB model: with the callback and the starter spec (A) vs plain (B)",
               lambda: trainers["ours"].save_checkpoint(base / f"ours-{next(counter)}.ckpt"),
               lambda: trainers["plain"].save_checkpoint(base / f"plain-{next(counter)}.ckpt"), int(runs), "<= 1.10")  # fmt: skip
    for path in base.glob("*.ckpt*"):
        path.unlink()


def fit(directory: str, mode: str) -> None:
    import logging
    import shutil
    import warnings

    from lightning.pytorch.callbacks import ModelCheckpoint

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    root = Path(directory) / f"fit-{mode}"
    shutil.rmtree(root, ignore_errors=True)
    callbacks = [ModelCheckpoint(dirpath=root, save_top_k=-1)]
    if mode == "callback":
        from ckptspec.lightning import CkptspecCallback

        callbacks.append(CkptspecCallback(spec=_relaxed_starter_spec(Path(directory))))
    _trainer(root, callbacks, epochs=3).fit(_lightning_module(2048, 12), _loader())  # ~200 MB of weights
    shutil.rmtree(root, ignore_errors=True)


def target_startup(directory: Path, runs: int) -> None:
    commands = {
        "ckptspec --help": (CKPTSPEC + ["--help"], "<= 0.15 s"),
        "ckptspec validate of a small checkpoint": (CKPTSPEC + ["validate", str(directory / "small" / "small.ckpt")], "<= 0.12 s"),
        "ckptspec validate of a 1 MB Lightning checkpoint": (CKPTSPEC + ["validate", str(directory / "mb1" / "lightning-1m.ckpt")], "<= 0.12 s"),
        "python -c pass (the interpreter alone, for scale)": ([PYTHON, "-c", "pass"], "-"),
    }
    for name, (command, target) in commands.items():
        alone(name, command, runs, target)
    for name, (command, _) in commands.items():
        instructions(name, command)


def target_audit(directory: Path, runs: int) -> None:
    """`audit` of the registry with --jobs 1 and 2, of one of its checkpoints alone, and the bare loop
    over all its files and over one. Differences between the whole registry and one checkpoint
    cancel the start-up on both sides, so `(audit_all - audit_one) - (bare_all - bare_one)` over the
    other checkpoints is what each costs beyond reading its bytes. CPU times, hardly stretched by a
    busy machine, also give the start-up `S` and the work `W` of `--jobs 1`, and so the speed-up two
    free cores would give: (S + W) / (S + W / 2)."""
    registry = directory / "registry"
    files = [str(path) for path in sorted(registry.glob("*/model.pt"))]
    count = len(files)
    audit = CKPTSPEC + ["audit", "--format", "json", "--output", os.devnull]
    commands = {
        "jobs 1": [*audit, str(registry), "--jobs", "1"],
        "jobs 2": [*audit, str(registry), "--jobs", "2"],
        "one": [*audit, str(Path(files[0]).parent), "--jobs", "1"],
        "bare": [PYTHON, SCRIPT, "_bare", *files],
        "bare one": [PYTHON, SCRIPT, "_bare", files[0]],
    }
    for command in commands.values():
        measure(command)  # warm the page cache and the bytecode cache
    before = load()
    rounds = [{name: measure(command) for name, command in commands.items()} for _ in range(runs)]
    print(f"audit of {count} checkpoints ({before}, after: {load()})")
    for name in commands:
        print(f"    {name:<9} wall {spread([r[name][0] for r in rounds])} s, CPU {spread([r[name][1] for r in rounds])} s,"
              f" peak {max(r[name][2] for r in rounds):.0f} MiB")  # fmt: skip

    def beyond_bytes(r: dict[str, tuple[float, float, float]], field: int) -> float:
        return 1000 * ((r["jobs 1"][field] - r["one"][field]) - (r["bare"][field] - r["bare one"][field])) / (count - 1)

    def two_cores(r: dict[str, tuple[float, float, float]]) -> float:
        work = (r["jobs 1"][1] - r["one"][1]) * count / (count - 1)
        return r["jobs 1"][1] / (r["jobs 1"][1] - work / 2)

    print(f"    per checkpoint beyond reading its bytes: wall {spread([beyond_bytes(r, 0) for r in rounds], 2)} ms,"
          f" CPU {spread([beyond_bytes(r, 1) for r in rounds], 2)} ms (target <= 2 ms)")
    print(f"    --jobs 2 speed-up over --jobs 1: wall {spread([r['jobs 1'][0] / r['jobs 2'][0] for r in rounds], 2)};"
          f" bound from CPU times, two free cores: {spread([two_cores(r) for r in rounds], 2)} (target >= 1.7)", flush=True)


def target_jobs(directory: Path, runs: int) -> None:
    """`--jobs 1` (A) against `--jobs 2` (B): whole processes over 200 small checkpoints with and
    without manifests and over 1,000 without, and `audit()` in this process over the same 200 once
    discovered, where start-up, discovery and the report do not count."""
    from ckptspec import audit
    from ckptspec._discover import discover

    jobs = CKPTSPEC + ["audit", "--format", "json", "--output", os.devnull, "--jobs"]
    for name in ("small-200-bare", "small-200", "small-1000-bare"):
        tree = str(directory / name)
        pair(f"audit --jobs 1 (A) vs --jobs 2 (B), {name}", [*jobs, "1", tree], [*jobs, "2", tree], runs, "A/B >= 1.7")
    found = discover([directory / "small-200-bare"])
    in_process("audit() --jobs 1 (A) vs --jobs 2 (B), small-200-bare discovered",
               lambda: audit([], jobs=1, discovery=found), lambda: audit([], jobs=2, discovery=found), runs, "A/B >= 1.7")  # fmt: skip


def _scanner(module: str, *arguments: str) -> list[str] | None:
    """A scanner's command, run by this interpreter (`pip install -c constraints.txt '.[bench]'`), or None when absent."""
    found = subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True).returncode == 0
    return [PYTHON, "-m", module, *arguments] if found else None


def target_scanners(directory: Path, runs: int) -> None:
    """ckptspec (A) against picklescan and modelscan (B) on the same files: one checkpoint judged whole
    (every pickle judged, every tensor listed), and a directory of 200 checkpoints."""
    one = str(directory / "mb1" / "lightning-1m.ckpt")
    files = [("Lightning-shaped 1 MB", one)]
    if (directory / "lightning-1g.ckpt").exists():
        files.append(("Lightning-shaped 1 GiB", str(directory / "lightning-1g.ckpt")))
    bare, with_manifests = str(directory / "small-200-bare"), str(directory / "small-200")
    for scanner, module, arguments in (("picklescan", "picklescan", ("-p",)), ("modelscan", "modelscan.cli", ("-p",))):
        for label, path in files:
            command = _scanner(module, *arguments, path)
            if command is None:
                print(f"{scanner} is not installed: skipped", flush=True)
                break
            pair(f"inspect --tensors (A) vs {scanner} (B), {label}", CKPTSPEC + ["inspect", "--tensors", path], command, runs, "<= 0.8")
        else:
            audit = CKPTSPEC + ["audit", "--jobs", "2", "--format", "json", "--output", os.devnull]
            command = _scanner(module, *arguments, bare)
            assert command is not None
            pair(f"audit --jobs 2 (A) vs {scanner} (B), {SMALL_COUNT} checkpoints of 1 MB without manifests",
                 [*audit, bare], command, runs, "<= 1.0")  # fmt: skip
            pair(f"audit --jobs 2 (A) vs {scanner} (B), {SMALL_COUNT} checkpoints of 1 MB, A with manifests",
                 [*audit, with_manifests], command, runs, "<= 1.3")  # fmt: skip
    pair("validate (A) vs picklescan's start and judgement of the same 1 MB file (B)", CKPTSPEC + ["validate", one],
         _scanner("picklescan", "-p", one) or [PYTHON, "-c", "pass"], runs, "A <= 0.12 s")  # fmt: skip


def target_audit_instructions(directory: Path, runs: int) -> None:
    """Instructions (valgrind's callgrind, user space) of `audit --jobs 1` over 5 and over 15 of the
    registry's checkpoints, and of the bare loop over the same files: the differences over the 10
    checkpoints between are each one's cost beyond reading its bytes, whatever the machine's load."""
    files = sorted((directory / "registry").glob("*/model.pt"))
    counts = {}
    for size in (5, 15):
        subset = directory / f"registry-{size}"
        if not subset.exists():
            for path in files[:size]:  # links to the registry's files: nothing is copied
                (subset / path.parent.name).mkdir(parents=True)
                for file in path.parent.iterdir():
                    os.link(file, subset / path.parent.name / file.name)
        audit = CKPTSPEC + ["audit", str(subset), "--jobs", "1", "--format", "json", "--output", os.devnull]
        measure(audit)  # the bytecode cache written, the files in the page cache
        counts["audit", size] = _instructions(audit)
        counts["bare", size] = _instructions([PYTHON, SCRIPT, "_bare", *(str(path) for path in files[:size])])
    per_audit, per_bare = ((counts[name, 15] - counts[name, 5]) / 10 for name in ("audit", "bare"))
    print(f"audit --jobs 1, instructions a checkpoint: {per_audit / 1e6:.1f} M, the bare loop's {per_bare / 1e6:.1f} M;"
          f" beyond reading its bytes {(per_audit - per_bare) / 1e6:.1f} M; start-up and one checkpoint"
          f" {counts['audit', 5] / 1e6 - 4 * per_audit / 1e6:.0f} M", flush=True)  # fmt: skip


def _instructions(command: Sequence[str]) -> int:
    """User-space instructions of `command` under callgrind (its children not followed)."""
    with tempfile.TemporaryDirectory() as scratch:
        completed = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out", *command],
                                   capture_output=True, text=True)  # fmt: skip
    collected = re.search(r"Collected : (\d+)", completed.stderr)
    if collected is None:
        raise SystemExit(f"callgrind gave no count for {' '.join(command)}: {completed.stderr[-500:]}")
    return int(collected.group(1))


def _run_shown(command: Sequence[str]) -> None:
    subprocess.run(command, check=True)


TARGETS = {
    "validate": target_validate,
    "inspect": target_inspect,
    "save": target_save,
    "startup": target_startup,
    "audit": target_audit,
    "scanners": target_scanners,
    "jobs": target_jobs,
    "audit-instructions": target_audit_instructions,
}
ON_REQUEST = ("audit-instructions",)
"""Run only when named: it needs valgrind, and takes minutes."""
CHILD_MODES: dict[str, Callable[..., None]] = {
    "_bare": lambda *paths: bare_crc(paths),
    "_torch_load": torch_load,
    "_tf": _tf_bundle,
    "_inspect_in_process": inspect_in_process,
    "_save_in_process": save_in_process,
    "_lightning_save": lightning_save,
    "_fit": fit,
}


def main(arguments: list[str]) -> None:
    if arguments and arguments[0] in CHILD_MODES:
        CHILD_MODES[arguments[0]](*arguments[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "run"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("targets", nargs="*", help=f"any of {', '.join(TARGETS)} (default: all)")
    options = parser.parse_intermixed_args(arguments)
    unknown = set(options.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {', '.join(sorted(unknown))}; choose from {', '.join(TARGETS)}")
    if options.action == "build":
        build(options.directory, options.targets)
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, Python {sys.version.split()[0]}", flush=True)
    if sys.flags.dont_write_bytecode:
        print("warning: PYTHONDONTWRITEBYTECODE is set: every child compiles ckptspec afresh", flush=True)
    for name in options.targets or [name for name in TARGETS if name not in ON_REQUEST]:
        TARGETS[name](options.directory, options.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
