"""Next-batch identity under a real `Trainer.fit`: the batches a run trains on after each save are
recorded beside the checkpoint, and a resumed fit's first batches are checked against them before
the first optimizer step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ckptspec import RestoreError, audit  # noqa: E402
from ckptspec.lightning import CkptspecCallback, RestoreNote  # noqa: E402

SAMPLES, BATCH = 32, 4
FIRST = Path("epoch=0-step=8.ckpt")


class Drawing(pl.LightningModule):
    """Keeps the inputs of every batch it trains on in its second epoch. `own_generator`: the loader
    shuffles with a generator seeded afresh whenever the loader is built (once per fit), the way
    many training scripts make their data order reproducible."""

    def __init__(self, own_generator: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.own_generator = own_generator
        self.second_epoch: list[list[float]] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        inputs, targets = batch
        if self.current_epoch == 1:
            self.second_epoch.append(inputs[:, 0].tolist())
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        data = torch.Generator().manual_seed(0)
        dataset = torch.utils.data.TensorDataset(torch.randn(SAMPLES, 4, generator=data), torch.randn(SAMPLES, 1, generator=data))
        generator = torch.Generator().manual_seed(1) if self.own_generator else None
        return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=generator)


def _fit(directory: Path, module: Drawing, *callbacks: pl.Callback, ckpt_path: Path | None = None, saving: bool = True) -> pl.Trainer:
    every_epoch = [pl.callbacks.ModelCheckpoint(dirpath=directory, save_top_k=-1)] if saving else []
    trainer = pl.Trainer(
        max_epochs=2, callbacks=[*callbacks, *every_epoch], enable_checkpointing=saving, accelerator="cpu", devices=1,
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=directory,
    )  # fmt: skip
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


def _straight_run(directory: Path, *, own_generator: bool = False) -> Drawing:
    torch.manual_seed(0)
    module = Drawing(own_generator)
    _fit(directory, module, CkptspecCallback())
    return module


def test_the_batches_after_each_save_are_recorded_and_a_resume_draws_them(tmp_path: Path) -> None:
    straight = _straight_run(tmp_path)
    record = json.loads((tmp_path / f"{FIRST}.next-batches-0.json").read_text())
    assert record["checkpoint"] == FIRST.name and len(record["batches"]) == 4 and record["loader"]["samples"] == SAMPLES
    last = sorted(tmp_path.glob("epoch=1-*.ckpt"))
    assert last and not list(tmp_path.glob(f"{last[0].name}.next-batches-*")), "the fit ended: no batch was drawn after the last save"
    assert audit([tmp_path]).passed

    torch.manual_seed(123)  # the restore puts the run's generators back
    resumed, callback = Drawing(), CkptspecCallback()
    _fit(tmp_path / "resumed", resumed, callback, ckpt_path=tmp_path / FIRST, saving=False)
    assert resumed.second_epoch == straight.second_epoch
    report = callback.last_report
    assert report is not None and report.data_order is not None and report.data_order.status == "matched"


def test_a_loader_that_draws_the_first_epochs_order_again_is_refused_before_it_trains(tmp_path: Path) -> None:
    """The loader's own generator is seeded afresh by every fit, and the callback cannot restore
    it: the resumed second epoch trains on the first epoch's order again."""
    straight = _straight_run(tmp_path, own_generator=True)

    torch.manual_seed(123)
    without = Drawing(own_generator=True)
    _fit(tmp_path / "without", without, ckpt_path=tmp_path / FIRST, saving=False)
    assert without.second_epoch and without.second_epoch != straight.second_epoch  # a plain resume trains on another order

    torch.manual_seed(123)
    resumed = Drawing(own_generator=True)
    with pytest.raises(RestoreError, match=r"data order: .*batch 0 after the resume is not batch 0 after the save") as raised:
        _fit(tmp_path / "resumed", resumed, CkptspecCallback(), ckpt_path=tmp_path / FIRST, saving=False)
    assert FIRST.name in str(raised.value)
    assert resumed.second_epoch == [], "refused before the first optimizer step"


def test_a_resume_with_no_record_says_its_data_order_was_not_checked(tmp_path: Path) -> None:
    _straight_run(tmp_path)
    (tmp_path / f"{FIRST}.next-batches-0.json").unlink()
    callback = CkptspecCallback()
    with pytest.warns(RestoreNote, match="data order not checked"):
        _fit(tmp_path / "resumed", Drawing(), callback, ckpt_path=tmp_path / FIRST, saving=False)
    assert callback.last_report is not None and callback.last_report.data_order is not None
    assert callback.last_report.data_order.status == "unchecked"


def _one_epoch_saving_every_two_steps(directory: Path, module: Drawing, *callbacks: pl.Callback, ckpt_path: Path | None = None) -> None:
    every_two = pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_top_k=-1)
    pl.Trainer(
        max_epochs=1, callbacks=[*callbacks, every_two], accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=directory,
    ).fit(module, ckpt_path=ckpt_path)  # fmt: skip


def test_a_resume_from_the_middle_of_an_epoch_that_trains_on_another_permutation_is_refused(tmp_path: Path) -> None:
    """Lightning resumes a plain DataLoader saved mid-epoch by starting the epoch's iterator over:
    its shuffle draws a new permutation from the restored generator (the next epoch's), and the
    rest of the epoch trains on samples the run never drew there."""

    class FirstEpoch(Drawing):
        def __init__(self) -> None:
            super().__init__()
            self.first_epoch: list[list[float]] = []

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
            self.first_epoch.append(batch[0][:, 0].tolist())
            return super().training_step(batch, index)

    torch.manual_seed(0)
    straight = FirstEpoch()
    _one_epoch_saving_every_two_steps(tmp_path, straight, CkptspecCallback())
    middle = tmp_path / "epoch=0-step=2.ckpt"

    without = FirstEpoch()
    _one_epoch_saving_every_two_steps(tmp_path / "without", without, ckpt_path=middle)
    trained = without.first_epoch
    assert trained and trained != straight.first_epoch[2 : 2 + len(trained)]  # the rest of the epoch, on other samples

    resumed = FirstEpoch()
    with pytest.raises(RestoreError, match="data order: .*batch 0 after the resume is not batch 0 after the save"):
        _one_epoch_saving_every_two_steps(tmp_path / "resumed", resumed, CkptspecCallback(), ckpt_path=middle)
    assert resumed.first_epoch == []


class _OwnShuffle(torch.utils.data.Sampler[int]):
    """A sampler of the script's own: a generator seeded when it is built, no state a checkpoint holds."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.generator = torch.Generator().manual_seed(1)

    def __len__(self) -> int:
        return self.length

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(torch.randperm(self.length, generator=self.generator).tolist())


class _Workers(Drawing):
    """Its loader: two worker processes and the custom sampler; every batch trained on is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.trained: list[list[float]] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        self.trained.append(batch[0][:, 0].tolist())
        return super().training_step(batch, index)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        dataset = super().train_dataloader().dataset
        return torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=_OwnShuffle(len(dataset)), num_workers=2)


def test_a_custom_sampler_under_worker_processes_not_put_back_mid_epoch_is_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    straight = _Workers()
    _one_epoch_saving_every_two_steps(tmp_path, straight, CkptspecCallback())
    middle = tmp_path / "epoch=0-step=2.ckpt"

    without = _Workers()
    _one_epoch_saving_every_two_steps(tmp_path / "without", without, ckpt_path=middle)
    assert without.trained[:2] == straight.trained[:2], "the resumed epoch trains on its first two batches again"

    resumed = _Workers()
    with pytest.raises(RestoreError, match=r"data order: the resumed run \(rank 0\) .*batch 0 after the resume is not batch 0 after the save"):
        _one_epoch_saving_every_two_steps(tmp_path / "resumed", resumed, CkptspecCallback(), ckpt_path=middle)
    assert resumed.trained == []
