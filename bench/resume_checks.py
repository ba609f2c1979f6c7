"""Benchmark: what proving a resume costs the steps of a training run.

    python bench/resume_checks.py DIR [--runs N]                     # both frameworks, A/B in turn
    python bench/resume_checks.py DIR --only lightning|trainer
    python bench/resume_checks.py DIR --child lightning|trainer K    # one run, for a timer of your own

Each run is a whole process: a run of 1,000 optimizer steps of a small model (4 layers of 256, batch
32: steps of about a millisecond, where a per-step cost shows most), saving every 50 steps, with
ckptspec's callback. A digests the next 4 batches after each save and checks the resume's (the
default `components.data_position.next_batches: 4`); B is the same run with `next_batches: 0`. The
run then resumes from its step-500 checkpoint and trains to the end, so the restore's measurement
(the optimizer's moments by CRC32C, step counts, generators) and the check of the first batches are
in A and B alike but for the batches. The ratio A/B is the cost of next-batch identity; the
target is ≤ 1.01 (1% of step time).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

from torch_save import child_seconds, spread  # a sibling script: bench/ is on the path of `python bench/...`

PYTHON = sys.executable
SCRIPT = str(Path(__file__).resolve())
STEPS, SAVE_EVERY, RESUME_AT, WIDTH, BATCH = 1000, 50, 500, 256, 32


def _spec(next_batches: int):  # type: ignore[no-untyped-def]
    from ckptspec._models import Spec

    return Spec.model_validate({
        "ckptspec": "1.2", "kind": "spec", "name": "bench",
        "components": {name: {"require": "optional"} for name in ("config", "scheduler", "scaler", "ema", "rng", "data_position", "fingerprint")}
        | {"data_position": {"require": "optional", "next_batches": next_batches}},
    })  # fmt: skip


def _data():  # type: ignore[no-untyped-def]
    import torch

    generator = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(STEPS * BATCH // 4, WIDTH, generator=generator))


def lightning_child(directory: Path, next_batches: int) -> None:
    import lightning.pytorch as pl
    import torch

    from ckptspec.lightning import CkptspecCallback

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(4)))

        def training_step(self, batch, index):  # type: ignore[no-untyped-def]
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.Adam(self.parameters(), lr=1e-4)

    def fit(ckpt_path: Path | None) -> None:
        saves = pl.callbacks.ModelCheckpoint(dirpath=directory, save_top_k=-1, every_n_train_steps=SAVE_EVERY)
        trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=directory,
                             callbacks=[CkptspecCallback(spec=_spec(next_batches)), saves])  # fmt: skip
        loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)
        trainer.fit(Model(), loader, ckpt_path=ckpt_path)

    torch.manual_seed(0)
    fit(None)
    fit(next(directory.glob(f"*step={RESUME_AT}.ckpt")))


def trainer_child(directory: Path, next_batches: int) -> None:
    import torch
    from transformers import Trainer, TrainingArguments

    from ckptspec.transformers import CkptspecCallback

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(4)))

        def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": self.net(features).pow(2).mean()}

    class Features(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.rows = _data().tensors[0]

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {"features": self.rows[index]}

    def train(resume: str | None) -> None:
        arguments = TrainingArguments(
            output_dir=str(directory), per_device_train_batch_size=BATCH, max_steps=STEPS, save_steps=SAVE_EVERY,
            report_to=[], use_cpu=True, seed=0, disable_tqdm=True, logging_steps=STEPS, learning_rate=1e-4,
        )  # fmt: skip
        trainer = Trainer(model=Model(), args=arguments, train_dataset=Features(), callbacks=[CkptspecCallback(spec=_spec(next_batches))])
        trainer.train(resume_from_checkpoint=resume)

    torch.manual_seed(0)
    train(None)
    train(str(directory / f"checkpoint-{RESUME_AT}"))


CHILDREN = {"lightning": lightning_child, "trainer": trainer_child}


def child(framework: str, directory: Path, next_batches: int) -> None:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    run = directory / f"{framework}-{next_batches}"
    shutil.rmtree(run, ignore_errors=True)
    CHILDREN[framework](run, next_batches)
    shutil.rmtree(run, ignore_errors=True)


def compare(framework: str, directory: Path, runs: int) -> None:
    pairs = []
    for run in range(runs):
        order = (4, 0) if run % 2 == 0 else (0, 4)
        measured = {k: child_seconds([PYTHON, SCRIPT, str(directory), "--child", framework, str(k)]) for k in order}
        pairs.append((measured[4], measured[0]))
    print(
        f"{framework}: {STEPS} steps saving every {SAVE_EVERY}, then resumed at {RESUME_AT}, whole process\n"
        f"    next_batches 4: {spread([a[0] for a, _ in pairs], 2)} s wall | next_batches 0: {spread([b[0] for _, b in pairs], 2)} s wall"
        f" | ratio wall {spread([a[0] / b[0] for a, b in pairs])}, CPU {spread([a[1] / b[1] for a, b in pairs])} (target <= 1.01)",
        flush=True,
    )


def main(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=list(CHILDREN))
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "K"))
    options = parser.parse_args(arguments)
    options.directory.mkdir(parents=True, exist_ok=True)
    if options.child is not None:
        child(options.child[0], options.directory, int(options.child[1]))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    for framework in [options.only] if options.only else list(CHILDREN):
        compare(framework, options.directory, options.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
