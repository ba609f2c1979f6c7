"""The restore measured after every hook of a real `Trainer.fit(ckpt_path=...)`, before the first
optimizer step: a module hook that undoes what Lightning restored is refused, where Lightning
trains on without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ckptspec import RestoreError, load_manifest  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

from .test_lightning_next_batches import FIRST, Drawing, _fit  # noqa: E402


class Scheduled(Drawing):
    """Adam under a StepLR stepped every batch; `undo` names the hook that undoes the restore."""

    def __init__(self, undo: str | None = None) -> None:
        super().__init__()
        self.undo = undo

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.undo == "optimizer_states":
            checkpoint["optimizer_states"] = []  # Lightning then loads no optimizer state, silently
        for state in checkpoint["optimizer_states"][0]["state"].values() if self.undo in _MOMENTS_REWRITTEN else ():
            for key in ("exp_avg", "exp_avg_sq"):  # the step counts stay as saved
                state[key] = _MOMENTS_REWRITTEN[self.undo](state[key])

    def on_train_start(self) -> None:
        if self.undo == "scheduler":
            config = self.trainer.lr_scheduler_configs[0]
            config.scheduler = torch.optim.lr_scheduler.StepLR(self.trainer.optimizers[0], step_size=3, gamma=0.5)


_MOMENTS_REWRITTEN = {
    "moments_in_bfloat16": lambda moment: moment.to(torch.bfloat16),  # half the memory, a common trick
    "moments_zeroed": torch.zeros_like,  # a "warm restart" of the optimizer
}


def _adam_step(trainer: pl.Trainer) -> int:
    return int(next(iter(trainer.optimizers[0].state.values()))["step"])


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, int, int]:
    """A two-epoch run saving every epoch: its Adam step count and scheduler step at the end."""
    torch.manual_seed(0)
    trainer = _fit(tmp_path, Scheduled(), CkptspecCallback())
    return tmp_path, _adam_step(trainer), trainer.lr_scheduler_configs[0].scheduler.last_epoch


def test_an_optimizer_state_dropped_in_on_load_checkpoint_is_refused(saved: tuple[Path, int, int]) -> None:
    directory, adam_step, _ = saved
    without = _fit(directory / "without", Scheduled(undo="optimizer_states"), ckpt_path=directory / FIRST, saving=False)
    assert _adam_step(without) == adam_step // 2, "Lightning restarted Adam at step 1 and trained on"

    resumed = Scheduled(undo="optimizer_states")
    with pytest.raises(RestoreError, match=r"optimizer 0: it holds 0 state tensors before the first step, \d+ when saved: its state was not restored"):
        _fit(directory / "resumed", resumed, CkptspecCallback(), ckpt_path=directory / FIRST, saving=False)
    assert resumed.second_epoch == []


def test_a_scheduler_built_anew_in_on_train_start_is_refused(saved: tuple[Path, int, int]) -> None:
    directory, _, scheduler_step = saved
    without = _fit(directory / "without", Scheduled(undo="scheduler"), ckpt_path=directory / FIRST, saving=False)
    assert without.lr_scheduler_configs[0].scheduler.last_epoch == scheduler_step // 2, "the schedule started again"

    with pytest.raises(RestoreError, match=r"scheduler 0: its step count is 0 before the first step, 8 when saved"):
        _fit(directory / "resumed", Scheduled(undo="scheduler"), CkptspecCallback(), ckpt_path=directory / FIRST, saving=False)


def test_an_untouched_restore_passes_the_measurement(saved: tuple[Path, int, int]) -> None:
    directory, adam_step, scheduler_step = saved
    callback = CkptspecCallback()
    resumed = _fit(directory / "resumed", Scheduled(), callback, ckpt_path=directory / FIRST, saving=False)
    assert (_adam_step(resumed), resumed.lr_scheduler_configs[0].scheduler.last_epoch) == (adam_step, scheduler_step)
    assert callback.last_report is not None and "optimizer" in callback.last_report.restored


@pytest.mark.parametrize(
    ("undo", "found"),
    [("moments_in_bfloat16", "its moments hold other values"), ("moments_zeroed", "its moments are all zeros, as a new optimizer's are")],
)
def test_moments_rewritten_in_on_load_checkpoint_are_refused(saved: tuple[Path, int, int], undo: str, found: str) -> None:
    directory, adam_step, _ = saved
    torch.manual_seed(5)
    without = _fit(directory / "without", Scheduled(undo=undo), ckpt_path=directory / FIRST, saving=False)
    torch.manual_seed(5)
    restored = _fit(directory / "restored", Scheduled(), ckpt_path=directory / FIRST, saving=False)
    assert _adam_step(without) == adam_step, "Lightning restored the step counts"
    difference = (without.lightning_module.layer.weight - restored.lightning_module.layer.weight).abs().max().item()
    assert difference > 0, "the rewritten moments trained to other weights, without a word"

    resumed = Scheduled(undo=undo)
    expected = rf"optimizer 0 param group 0: the state of 'layer.weight' before the first step is not the one saved \(CRC32C [0-9a-f]{{8}}, [0-9a-f]{{8}} when saved\): {found}; 1 more of the 2"
    with pytest.raises(RestoreError, match=expected):
        _fit(directory / "resumed", resumed, CkptspecCallback(), ckpt_path=directory / FIRST, saving=False)
    assert resumed.second_epoch == [], "refused before the first optimizer step"


def test_the_next_save_records_what_the_resume_proved(saved: tuple[Path, int, int]) -> None:
    directory, _, _ = saved
    _fit(directory / "resumed", Scheduled(), CkptspecCallback(), ckpt_path=directory / FIRST)
    (after,) = (directory / "resumed").glob("epoch=1-*.ckpt")
    parent = load_manifest(f"{after}.ckptspec.yaml").lineage.parent
    assert parent.resumed and parent.attested == ["data_order", "model", "optimizer", "scheduler"]
