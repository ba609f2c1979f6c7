"""Real `Trainer.fit` runs with `ModelCheckpoint` and the ckptspec callback, interrupted after six
steps and resumed to ten: as they should be, and as real scripts get it wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ckptspec.lightning import CkptspecCallback  # noqa: E402
from ckptspec.lineage import judge_run  # noqa: E402


class _Module(pl.LightningModule):
    def __init__(self, seed_at_train_start: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))

    def on_train_start(self) -> None:
        if self.hparams.seed_at_train_start:  # the script seeds when training starts: a resume then replays it
            pl.seed_everything(0, verbose=False)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 3), "interval": "step"}}

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator))
        return torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)


def _fit(directory: Path, module: _Module, max_steps: int, ckpt_path: Path | None = None, **callback: bool) -> None:
    every_two = pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_top_k=-1, save_last=True)
    pl.Trainer(
        max_steps=max_steps,
        callbacks=[every_two, CkptspecCallback(**callback)],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=True,
    ).fit(module, ckpt_path=ckpt_path)


@pytest.fixture(scope="session")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six steps of a run, a checkpoint every two (and `last.ckpt` beside each)."""
    directory = tmp_path_factory.mktemp("lightning-run") / "checkpoints"
    pl.seed_everything(0, verbose=False)
    _fit(directory, _Module(), 6)
    return directory


def _errors(directory: Path) -> set[tuple[str, str]]:
    report = judge_run([directory]).report
    return {(finding.code, Path(finding.checkpoint).name) for finding in report.findings if finding.severity == "error"}


def _copy(interrupted: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "checkpoints"
    shutil.copytree(interrupted, directory)
    return directory


def test_a_fit_resumed_from_last_ckpt_continues_the_run(interrupted: Path, tmp_path: Path) -> None:
    directory = _copy(interrupted, tmp_path)
    _fit(directory, _Module(seed_at_train_start=False), 10, directory / "last.ckpt")
    judgement = judge_run([directory])
    assert [finding for finding in judgement.report.findings if finding.severity == "error"] == []
    assert len({facts.run for facts in judgement.graph.checkpoints}) == 1
    assert sorted(facts.global_step for facts in judgement.graph.checkpoints) == [2, 4, 6, 8, 10]


def test_seed_everything_after_the_restore_is_caught(interrupted: Path, tmp_path: Path) -> None:
    directory = _copy(interrupted, tmp_path)
    _fit(directory, _Module(seed_at_train_start=True), 10, directory / "last.ckpt")
    assert _errors(directory) == {("CKS510", "epoch=1-step=8.ckpt")}


def test_a_fit_resumed_from_an_older_checkpoint_is_a_rollback(interrupted: Path, tmp_path: Path) -> None:
    directory = _copy(interrupted, tmp_path)
    _fit(directory, _Module(seed_at_train_start=False), 6, directory / "epoch=0-step=4.ckpt")
    assert _errors(directory) == {("CKS504", "epoch=1-step=6-v1.ckpt")}  # ModelCheckpoint keeps the old step-6 file


def test_weights_loaded_then_fit_without_ckpt_path_is_another_run_started_from_them(interrupted: Path, tmp_path: Path) -> None:
    directory = _copy(interrupted, tmp_path)
    module = _Module.load_from_checkpoint(directory / "last.ckpt", seed_at_train_start=False)
    _fit(directory, module, 2)
    errors = _errors(directory)
    assert errors == {("CKS506", "epoch=0-step=2-v1.ckpt")}


def test_a_declared_fork_is_no_finding(interrupted: Path, tmp_path: Path) -> None:
    directory = _copy(interrupted, tmp_path)
    forked = tmp_path / "fine-tune"
    _fit(forked, _Module(seed_at_train_start=False), 10, directory / "last.ckpt", fork=True)
    judgement = judge_run([directory, forked])
    assert [finding for finding in judgement.report.findings if finding.severity == "error"] == []
    assert len({facts.run for facts in judgement.graph.checkpoints}) == 2


def test_checkpoints_model_checkpoint_replaced_leave_no_error(tmp_path: Path) -> None:
    """`ModelCheckpoint` keeps one checkpoint by default, removing the one before at every save:
    the one kept names a parent that is gone, which is where its chain is shown from."""
    directory = tmp_path / "checkpoints"
    pl.Trainer(
        max_steps=6,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=2), CkptspecCallback()],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(_Module(seed_at_train_start=False))
    assert sorted(path.name for path in directory.glob("*.ckpt")) == ["epoch=1-step=6.ckpt"]
    findings = judge_run([directory]).report.findings
    assert [(finding.code, finding.severity, Path(finding.checkpoint).name) for finding in findings] == [("CKS501", "info", "epoch=1-step=6.ckpt")]


class _Scored(_Module):
    """Logs `chosen`, highest after the second and the eighth steps: the two checkpoints a top-2 keeps."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        self.log("chosen", {1: 5.0, 7: 4.0}.get(self.global_step, 0.0))
        return super().training_step(batch, batch_index)


def test_checkpoints_save_top_k_removed_between_two_it_kept_are_no_hole(tmp_path: Path) -> None:
    """`save_top_k` with a monitor keeps the best checkpoints wherever they fall in the run: the one
    after a removed stretch names a parent that is gone while an earlier one is there. Its manifest
    records ModelCheckpoint's retention, so that is a note, not a hole."""
    directory = tmp_path / "checkpoints"
    best_two = pl.callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_top_k=2, monitor="chosen", mode="max")
    pl.seed_everything(0, verbose=False)
    pl.Trainer(
        max_steps=10, callbacks=[best_two, CkptspecCallback()], accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    ).fit(_Scored())  # fmt: skip
    kept = sorted(path.name for path in directory.glob("*.ckpt"))
    assert [name.split("step=")[1] for name in kept] == ["2.ckpt", "8.ckpt"]

    findings = judge_run([directory]).report.findings
    assert [(finding.code, finding.severity, finding.checkpoint.split("step=")[1]) for finding in findings] == [("CKS501", "info", "8.ckpt")]
    assert "keeps its best 2 by chosen" in findings[0].message
