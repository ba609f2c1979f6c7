"""A child that saves checkpoints and is killed at a chosen step of a save.

Run as `python _zygote.py ADAPTER DIRECTORY`; it imports the framework once, then reads one JSON
request a line from stdin and answers each with one JSON line on stdout. Every request runs in a
process forked for it, so a kill ends that process only:

- `{"op": "save", "round": R, "kill_at": N}`: save round R (every parameter holds R) over what is
  in DIRECTORY; with `kill_at`, SIGKILL just before the N-th input/output step of the save (a call
  into C that writes, syncs, renames, removes or opens: the same count in every run of a round).
  Answers `{"steps": S}` (steps the save made) or `{"killed": true}`. With `kill_after_commit`
  instead, the N-th step after the commit of the pair began; with `kill_in_save`, the N-th step
  after the Keras callback's save of a file (or the first save of a sharded directory) began.
- `{"op": "resume"}`: restore from DIRECTORY with the adapter's own resume; answers
  `{"round": R}` (the value the parameters got back) or `{"error": "..."}`.
- `{"op": "interrupt", "round": R, "at": N}`: save round R and press Ctrl-C (a real SIGINT) just
  before its N-th step; answers `{"raised": "KeyboardInterrupt" | null, "steps": S}`.
- `{"op": "check"}`: validate the adapter's checkpoint and audit DIRECTORY; answers the errors of
  each and the leftovers `audit` lists (so that a child on a disk of its own judges it itself).
- `{"op": "fill", "leave": B}`: fill the file system DIRECTORY is on until B bytes are free;
  `{"op": "unfill"}` frees them again. A save request with `"fsize": B` runs under a file size
  limit of B bytes (`RLIMIT_FSIZE`; a write past it fails with EFBIG).

`python _zygote.py ADAPTER DIRECTORY ANSWER` writes each answer through the file ANSWER (by
default beside DIRECTORY), which must not be on a disk the requests fill.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_STEPS = frozenset(
    {
        # os and io, on any thread (torch.save's bytes go through the write thread's writev)
        "write", "writev", "pwrite", "fsync", "fdatasync", "replace", "rename", "unlink", "remove", "rmdir",
        "mkdir", "open", "close", "ftruncate", "truncate", "link", "symlink", "flock", "lockf", "scandir",
        # TensorFlow's file system and the ops that write bundles
        "DeleteFile", "RenameFile", "RecursivelyCreateDir", "CreateDir", "DeleteRecursively", "CopyFile",
        "append", "flush", "TFE_Py_Execute", "TFE_Py_FastPathExecute",
    }
)


class _Steps:
    """Counts the input/output steps every thread makes; `action` runs just before step `at`."""

    def __init__(self, at: int | None, action: Callable[[], None], *, after: tuple[str, int] | None = None) -> None:
        self.at = at
        self.after = (_MARKS[after[0]], after[1]) if after is not None else None
        """Count `at` from the call of a function instead (`Save.commit`: the steps before it vary
        with how the write thread batches its writes, those after it do not)."""
        self.count = 0
        self._action = action
        self._lock = threading.Lock()

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", None) in _STEPS and not isinstance(getattr(arg, "__self__", None), list):
            self.step()
        elif event == "call" and frame.f_code.co_name == "_swap" and frame.f_code.co_filename.endswith("_atomic.py"):
            self.step()  # renameat2(RENAME_EXCHANGE) through ctypes, which no profile event shows
        elif event == "call" and self.after is not None and (frame.f_code.co_name, os.path.basename(frame.f_code.co_filename)) in self.after[0]:
            self.at, self.after = self.count + self.after[1], None

    def step(self) -> None:
        with self._lock:
            self.count += 1
            now = self.count == self.at
        if now:
            self._action()

    def __enter__(self) -> _Steps:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


_MARKS = {
    "commit": {("commit", "_commit.py"), ("commit", "_tf_commit.py")},
    "save": {("_saving", "keras.py"), ("_save_staged_directory", "lightning.py")},
}
"""The functions a kill point can be counted from: the commit of a pair (or of a TensorFlow
bundle), the Keras callback's save of a file, the save of a Lightning sharded directory."""


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


class Torch:
    @staticmethod
    def prepare() -> None:
        """Imports done once, before the forks (no thread is started: none would survive a fork)."""
        import torch._dynamo  # noqa: F401  (what an optimizer's first step imports)

        import ckptspec.torch  # noqa: F401

    def __init__(self, directory: Path) -> None:
        import torch

        torch.set_num_threads(1)
        self.torch, self.directory = torch, directory
        self.path = directory / "model.pt"

    def model(self, value: float) -> Any:
        torch = self.torch
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 3))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(value)
        return model

    def save(self, round: int, steps: _Steps) -> None:
        import ckptspec.torch as ckpt

        model = self.model(round)
        optimizer = self.torch.optim.SGD(model.parameters(), lr=0.1)
        with steps:
            ckpt.save(self.path, model=model, optimizer=optimizer)

    def checkpoint(self) -> Path:
        return self.path

    def resume(self) -> float:
        import ckptspec.torch as ckpt

        model = self.model(-1)
        ckpt.restore(self.path, model=model, optimizer=self.torch.optim.SGD(model.parameters(), lr=0.1))
        return float(next(model.parameters()).detach().flatten()[0])


class TorchSharded(Torch):
    """`ckptspec.torch.save_sharded` of the same state in one process (DCP without a process
    group): a directory of DCP files, written into a staging directory and swapped in."""

    def __init__(self, directory: Path) -> None:
        import torch.distributed as dist

        super().__init__(directory)
        self.path = directory / "sharded"
        store = directory.parent / f"store-{os.getpid()}"  # each forked request is a process group of one
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)

    def save(self, round: int, steps: _Steps) -> None:
        import ckptspec.torch as ckpt

        model = self.model(round)
        with steps:
            ckpt.save_sharded(self.path, {"model": model.state_dict()})

    def resume(self) -> float:
        import ckptspec.torch as ckpt

        model = self.model(-1)
        ckpt.restore_sharded(self.path, {"model": model.state_dict()})  # loaded into the parameters' own tensors
        return float(next(model.parameters()).detach().flatten()[0])


class Lightning:
    """`Trainer.fit` for two more epochs (of two steps) per round from `last.ckpt`, a checkpoint
    after each epoch: `ModelCheckpoint` keeps the newest (`save_top_k=1` removes the one before)
    and `last.ckpt`."""

    @staticmethod
    def prepare() -> None:
        import pytorch_lightning  # noqa: F401
        import torch._dynamo  # noqa: F401

        import ckptspec.lightning  # noqa: F401

    def __init__(self, directory: Path) -> None:
        import pytorch_lightning as pl
        import torch

        torch.set_num_threads(1)
        self.pl, self.torch, self.directory = pl, torch, directory
        self.last = directory / "last.ckpt"

    def module(self) -> Any:
        pl, torch = self.pl, self.torch

        class Module(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(4, 3)

            def training_step(self, batch: Any, index: int) -> Any:
                inputs, targets = batch
                return torch.nn.functional.cross_entropy(self.net(inputs), targets)

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.1)

            def train_dataloader(self) -> Any:
                generator = torch.Generator().manual_seed(0)
                data = torch.utils.data.TensorDataset(torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator))
                return torch.utils.data.DataLoader(data, batch_size=4)

        return Module()

    def plugins(self) -> list[Any]:
        return []

    def strategy(self) -> Any:
        return "auto"

    def trainer(self, max_epochs: int, *callbacks: Any) -> Any:
        from ckptspec.lightning import CkptspecCallback

        every_epoch = self.pl.callbacks.ModelCheckpoint(dirpath=self.directory, save_last=True, save_top_k=1)
        return self.pl.Trainer(
            plugins=self.plugins(),
            strategy=self.strategy(),
            default_root_dir=self.directory.parent,
            max_epochs=max_epochs,
            callbacks=[CkptspecCallback(), every_epoch, *callbacks],
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )

    def save(self, round: int, steps: _Steps) -> None:
        trainer = self.trainer(2 * round)
        with steps:
            trainer.fit(self.module(), ckpt_path=self.last if self.last.exists() else None)

    def checkpoint(self) -> Path:
        return self.last

    def resume(self) -> float:
        resumed: list[int] = []

        class Stop(self.pl.Callback):  # type: ignore[name-defined,misc]
            def on_train_start(self, trainer: Any, module: Any) -> None:
                resumed.append(trainer.current_epoch)
                trainer.should_stop = True

        self.trainer(10_000, Stop()).fit(self.module(), ckpt_path=self.last)
        return resumed[0] / 2  # the round whose epochs last.ckpt holds


_SPEC = {
    "name": "crash",
    "description": "A manifest larger than a page, as a spec's own text makes it (the bundle does not hold it). " * 60,
    "components": {name: {"require": "optional"} for name in ("optimizer", "rng", "data_position", "fingerprint")},
}
"""The spec of the TensorFlow manager's saves, as a document."""


class TensorFlow:
    """`ckptspec.tensorflow.CheckpointManager(max_to_keep=1)` over a small Keras model: a round
    resumes from the latest bundle (as a restarted run does, which also continues the numbering),
    sets every weight to R and saves, so that every save removes the bundle it replaces."""

    @staticmethod
    def prepare() -> None:
        """TensorFlow is imported, but no op runs before the forks (its thread pools start with the first)."""
        import keras  # noqa: F401
        import tensorflow  # noqa: F401

        import ckptspec.tensorflow  # noqa: F401

    def __init__(self, directory: Path) -> None:
        import keras

        self.keras, self.directory = keras, directory

    def manager(self, value: float) -> Any:
        import ckptspec.tensorflow
        from ckptspec import Spec

        keras = self.keras
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        for variable in model.weights:
            variable.assign(keras.ops.full(variable.shape, value))
        return ckptspec.tensorflow.CheckpointManager(
            self.directory, model=model, optimizer=keras.optimizers.SGD(0.1), global_generators=(), max_to_keep=1, spec=Spec.model_validate(_SPEC)
        )

    def save(self, round: int, steps: _Steps) -> None:
        manager = self.manager(-1)
        if manager.latest_checkpoint is not None:
            manager.restore()
        for variable in manager.model.weights:
            variable.assign(self.keras.ops.full(variable.shape, float(round)))
        with steps:
            manager.save()

    def checkpoint(self) -> Path:
        from ckptspec.formats.tf_state import latest_checkpoint

        return latest_checkpoint(self.directory)

    def resume(self) -> float:
        manager = self.manager(-1)
        manager.restore()
        return float(manager.model.weights[0].numpy().flat[0])


class Keras:
    """`model.fit` for one epoch through `ckptspec.keras.ManifestCallback(ModelCheckpoint("model.keras"))`:
    every weight holds R and the optimizer does not move them (a rate of 0), so the file the epoch's
    end writes holds R."""

    prepare = TensorFlow.prepare

    def __init__(self, directory: Path) -> None:
        import keras

        self.keras, self.directory, self.path = keras, directory, directory / "model.keras"

    def model(self, value: float) -> Any:
        keras = self.keras
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        for variable in model.weights:
            variable.assign(keras.ops.full(variable.shape, value))
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        return model

    def save(self, round: int, steps: _Steps) -> None:
        import numpy as np

        import ckptspec.keras

        model = self.model(float(round))
        callback = ckptspec.keras.ManifestCallback(self.keras.callbacks.ModelCheckpoint(self.path))
        inputs, targets = np.ones((4, 8), "float32"), np.zeros((4, 2), "float32")
        with steps:
            model.fit(inputs, targets, epochs=1, batch_size=4, verbose=0, callbacks=[callback])

    def checkpoint(self) -> Path:
        return self.path

    def resume(self) -> float:
        import ckptspec.keras

        return float(ckptspec.keras.load_model(self.path).weights[0].numpy().flat[0])


class LightningOwnIO(Lightning):
    """`Lightning`, its files written by a `CheckpointIO` of the program's own."""

    def plugins(self) -> list[Any]:
        torch = self.torch

        class OwnIO(self.pl.plugins.CheckpointIO):  # type: ignore[name-defined,misc]
            def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
                with open(path, "wb") as file:
                    torch.save(checkpoint, file)

            def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool = False) -> dict[str, Any]:
                return torch.load(path, map_location=map_location, weights_only=False)

            def remove_checkpoint(self, path: Any) -> None:
                if os.path.exists(path):  # as Lightning's own: a kill may have removed it already
                    os.remove(path)

        return [OwnIO()]


class LightningSharded(Lightning):
    """`Lightning` under ModelParallelStrategy (one process, gloo): every checkpoint is a sharded
    directory of DCP files and `meta.pt`, which the strategy writes itself."""

    def strategy(self) -> Any:
        from pytorch_lightning.strategies import ModelParallelStrategy

        os.environ["MASTER_PORT"] = str(_free_port())  # each forked run starts its own process group
        return ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1, process_group_backend="gloo")

    def module(self) -> Any:
        class Sharded(type(super().module())):  # type: ignore[misc]
            def configure_model(self) -> None:
                from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

                parallelize_module(self.net, self.device_mesh["tensor_parallel"], ColwiseParallel())  # the weights become DTensors

        return Sharded()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


ADAPTERS = {"torch": Torch, "torch-sharded": TorchSharded, "lightning": Lightning, "lightning-own-io": LightningOwnIO, "lightning-sharded": LightningSharded, "tensorflow": TensorFlow, "keras": Keras}


def _check(adapter: Any) -> dict[str, Any]:
    from ckptspec import audit, validate

    report = audit([adapter.directory])
    return {
        "validate": [finding.message for finding in validate(adapter.checkpoint()).errors],
        "audit": [f"{finding.code} {finding.message}" for result in report.results for finding in result.errors],
        "leftovers": sorted(Path(finding.file or "").name for finding in report.findings if finding.code == "CKS022"),
    }


def _fill(directory: Path, leave: int) -> dict[str, Any]:
    disk = os.statvfs(directory)
    filler = directory.parent / "filler"
    with open(filler, "ab") as handle:
        handle.write(b"\0" * max(disk.f_bavail * disk.f_frsize - leave, 0))
    disk = os.statvfs(directory)
    return {"free": disk.f_bavail * disk.f_frsize}


@contextlib.contextmanager
def _file_size_limited(size: int | None) -> Iterator[None]:
    """Files grow to `size` bytes at most in the block (None: no limit); the answer is written after it."""
    if size is None:
        yield
        return
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)


def _run(request: dict[str, Any], adapter: Any) -> dict[str, Any]:
    if request["op"] == "check":
        return _check(adapter)
    if request["op"] == "fill":
        return _fill(adapter.directory, request["leave"])
    if request["op"] == "unfill":
        (adapter.directory.parent / "filler").unlink()
        return {}
    if request["op"] == "resume":
        try:
            return {"round": adapter.resume()}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    if request["op"] == "interrupt":
        steps = _Steps(request["at"], _ctrl_c)
        try:
            adapter.save(request["round"], steps)
        except KeyboardInterrupt:
            return {"raised": "KeyboardInterrupt", "steps": steps.count}
        return {"raised": None, "steps": steps.count}
    after = next(((mark, request[key]) for key, mark in (("kill_after_commit", "commit"), ("kill_in_save", "save")) if key in request), None)
    steps = _Steps(request.get("kill_at"), _kill, after=after)
    try:
        with _file_size_limited(request.get("fsize")):
            adapter.save(request["round"], steps)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "steps": steps.count}
    return {"steps": steps.count}


def _forked(request: dict[str, Any], make: Callable[[], Any], result: Path) -> dict[str, Any]:
    result.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            answer = _run(request, make())
            result.write_text(json.dumps(answer))
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return {"killed": True}
    if not result.exists():
        return {"error": f"the child ended with status {status} and no answer"}
    return json.loads(result.read_text())


def main() -> None:
    name, directory = sys.argv[1], Path(sys.argv[2])
    adapter = ADAPTERS[name]
    result = Path(sys.argv[3]) if len(sys.argv) > 3 else directory.parent / f"{directory.name}.answer.json"
    directory.mkdir(parents=True, exist_ok=True)
    adapter.prepare()
    for line in sys.stdin:
        answer = _forked(json.loads(line), lambda: adapter(directory), result)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
