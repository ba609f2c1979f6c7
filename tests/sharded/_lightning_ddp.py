"""A real Lightning DDP run (CPU, gloo) in each process `torch.multiprocessing.spawn` starts: the
environment variables torchrun would set make Lightning's `strategy="ddp"` join the spawned
processes instead of launching its own. Each rank trains two epochs straight, then resumes a fresh
model from the first epoch's checkpoint, and writes what it drew in the second epoch both times."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy
import pytorch_lightning as pl
import torch

from ckptspec.lightning import CkptspecCallback

WORLD = 2
SAMPLES, BATCH = 32, 4


class NoisyModule(pl.LightningModule):
    """Each step draws from python's, numpy's and torch's generators; the torch draw feeds the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.second_epoch_draws: list[list[float]] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        noise = torch.randn_like(inputs)
        if self.current_epoch == 1:
            self.second_epoch_draws.append([random.random(), float(numpy.random.rand()), noise.sum().item()])
        return torch.nn.functional.mse_loss(self.layer(inputs + 0.1 * noise), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        generator = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(SAMPLES, 4, generator=generator), torch.randn(SAMPLES, 1, generator=generator))
        return torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)


def trainer(root: Path, *callbacks: Any, devices: int = WORLD, **options: Any) -> pl.Trainer:
    settings: dict[str, Any] = {"max_epochs": 2, "strategy": "ddp" if devices > 1 else "auto", **options}
    return pl.Trainer(
        default_root_dir=root,
        callbacks=list(callbacks),
        accelerator="cpu",
        devices=devices,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **settings,
    )


def _seed(seed: int) -> None:
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def _join(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD), RANK=str(rank),
                      LOCAL_RANK=str(rank), NODE_RANK="0")  # fmt: skip


def _leave() -> None:
    """End the rank once its results are written, without running C++ static destructors: one of
    torch's distributed threads, still joinable then, now and then aborts the exit ("terminate called
    without an active exception"), after everything the test reads was done."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def fit_and_resume(rank: int, root: str, port: int) -> None:
    _join(rank, port)
    directory = Path(root)
    _seed(10 + rank)  # every rank draws its own numbers
    straight = NoisyModule()
    saving = pl.callbacks.ModelCheckpoint(dirpath=directory / "checkpoints", save_top_k=-1)
    trainer(directory, saving, CkptspecCallback()).fit(straight)

    _seed(999)  # the same numbers on every rank, as a resume that restores one rank's generators everywhere
    resumed = NoisyModule()
    callback = CkptspecCallback()
    first = directory / "checkpoints" / f"epoch=0-step={SAMPLES // WORLD // BATCH}.ckpt"
    trainer(directory, callback, enable_checkpointing=False).fit(resumed, ckpt_path=first)
    report = callback.last_report
    result = {
        "straight": straight.second_epoch_draws,
        "resumed": resumed.second_epoch_draws,
        "weights_identical": all(torch.equal(a, b) for a, b in zip(straight.state_dict().values(), resumed.state_dict().values())),
        "generators": sorted(report.generators) if report is not None else None,
        "data_position": report.data_position if report is not None else None,
        "data_order": report.data_order.status if report is not None and report.data_order is not None else None,
    }
    (directory / f"rank{rank}.json").write_text(json.dumps(result))
    _leave()


class ShardedModule(NoisyModule):
    """NoisyModule wide enough to split, made tensor-parallel over the strategy's mesh in
    `configure_model`, as Lightning's ModelParallelStrategy expects: the first layer's weight split
    by rows across the ranks, the second's by columns."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def configure_model(self) -> None:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        parallelize_module(self.layer, self.device_mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def fit_model_parallel(rank: int, root: str, port: int) -> None:
    """One epoch under ModelParallelStrategy on CPU (gloo, tensor parallel over both ranks): each
    checkpoint is a sharded directory. Then a fresh model resumes from it."""
    from pytorch_lightning.strategies import ModelParallelStrategy

    _join(rank, port)
    _seed(20 + rank)
    strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=WORLD, process_group_backend="gloo")
    saving = pl.callbacks.ModelCheckpoint(dirpath=Path(root) / "checkpoints")
    trained = ShardedModule()
    trainer(Path(root), saving, CkptspecCallback(), strategy=strategy, max_epochs=1).fit(trained)
    straight = [parameter.full_tensor().sum().item() for parameter in trained.parameters()]

    _seed(999)
    resumed, callback = ShardedModule(), CkptspecCallback()
    again = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=WORLD, process_group_backend="gloo")
    first = Path(root) / "checkpoints" / f"epoch=0-step={SAMPLES // BATCH}.ckpt"
    trainer(Path(root), callback, strategy=again, max_epochs=1, enable_checkpointing=False).fit(resumed, ckpt_path=first)
    report = callback.last_report
    result = {
        "weights": [straight, [parameter.full_tensor().sum().item() for parameter in resumed.parameters()]],
        "tensors": [report.tensors_saved, report.tensors_loaded] if report is not None else None,
        "generators": sorted(report.generators) if report is not None else None,
        "notes": list(report.notes) if report is not None else None,
    }
    (Path(root) / f"rank{rank}.json").write_text(json.dumps(result))
    _leave()


class SeedingModule(NoisyModule):
    """NoisyModule in a script that seeds each rank when training starts, as many do: harmless on
    the first fit, a re-seed on a resume, which then replays the run's first draws instead of
    continuing them."""

    def __init__(self, seed_at_train_start: bool) -> None:
        super().__init__()
        self.seed_at_train_start = seed_at_train_start
        self.draws: dict[int, float] = {}

    def on_train_start(self) -> None:
        if self.seed_at_train_start:
            _seed(30 + self.global_rank)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        noise = torch.randn_like(inputs)
        self.draws[self.global_step + 1] = noise.sum().item()
        return torch.nn.functional.mse_loss(self.layer(inputs + 0.1 * noise), targets)


def fit_interrupted_and_resumed(rank: int, root: str, port: int) -> None:
    """Two runs under DDP, each six steps then resumed from `last.ckpt` to ten, a checkpoint every two
    steps: `restored/` lets the callback bring every rank's generators back; `reseeded/` seeds
    again when training starts, after the restore. Each rank writes its torch draw of every step."""
    _join(rank, port)
    for name, seeds in (("restored", False), ("reseeded", True)):
        directory = Path(root) / name
        _seed(30 + rank)
        draws: dict[int, float] = {}
        for steps, ckpt_path in ((6, None), (10, directory / "last.ckpt")):
            module = SeedingModule(seeds)
            saving = pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_top_k=-1, save_last=True)
            trainer(directory, saving, CkptspecCallback(), max_epochs=-1, max_steps=steps).fit(module, ckpt_path=ckpt_path)
            draws.update(module.draws)
        (Path(root) / f"{name}-rank{rank}.json").write_text(json.dumps(draws))
    _leave()


def resume_refused_on_one_rank(rank: int, root: str, port: int) -> None:
    """Resume from `root`'s first checkpoint, whose record of rank 1's next batches names other
    batches: rank 1 refuses at its first batch. Each rank writes what its fit raised."""
    _join(rank, port)
    _seed(999)
    first = Path(root) / "checkpoints" / f"epoch=0-step={SAMPLES // WORLD // BATCH}.ckpt"
    try:
        trainer(Path(root), CkptspecCallback(), enable_checkpointing=False).fit(NoisyModule(), ckpt_path=first)
        raised = None
    except Exception as exc:  # noqa: BLE001 - what each rank raised is the result
        raised = f"{type(exc).__name__}: {exc}"
    (Path(root) / f"refused-rank{rank}.json").write_text(json.dumps(raised))
    _leave()
