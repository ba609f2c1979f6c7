"""Each trap of a Trainer resume: the plain Trainer's silence first, then the callback's RestoreError
naming the file and component, raised before the first optimizer step after the resume."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptspec import RestoreError, audit, validate

from .conftest import fingerprint_batch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from ckptspec.transformers import CkptspecCallback  # noqa: E402

from ._tiny import Tokens, model, trainer, weights  # noqa: E402

RESUMED = 8


@pytest.fixture()
def moved(recorded_run: tuple[Path, Any], tmp_path: Path) -> Path:
    """checkpoint-8 of the recorded run, moved out of the run's output directory."""
    copy = tmp_path / "kept" / "checkpoint-8"
    shutil.copytree(recorded_run[0] / f"checkpoint-{RESUMED}", copy)
    return copy


def resume(checkpoint: Path, *, checked: bool, **options: Any) -> Any:
    callbacks = [CkptspecCallback(fingerprint_batch=fingerprint_batch())] if checked else []
    resumed = trainer(checkpoint.parent.parent / "resumed", callbacks=callbacks, **options)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    return resumed


def refused(checkpoint: Path, **options: Any) -> str:
    callbacks = [CkptspecCallback(fingerprint_batch=fingerprint_batch())]
    resumed = trainer(checkpoint.parent.parent / "resumed", callbacks=callbacks, **options)
    with pytest.raises(RestoreError) as raised:
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == RESUMED  # raised before the first optimizer step after the resume
    return str(raised.value)


def differs(trained: Any, uninterrupted: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(value, uninterrupted[name]) for name, value in weights(trained).items())


def test_the_clean_resume_passes_and_is_bit_identical(recorded_run: tuple[Path, dict[str, torch.Tensor]], moved: Path) -> None:
    assert validate(moved).passed
    resumed = resume(moved, checked=True)
    assert not differs(resumed, recorded_run[1])
    callback = next(cb for cb in resumed.callback_handler.callbacks if isinstance(cb, CkptspecCallback))
    assert callback.last_report is not None and "rng" in callback.last_report["checked"]
    assert callback.last_report["data_order"].status == "matched"  # the first 4 batches are the run's


def test_the_batches_after_each_save_are_recorded_inside_its_checkpoint(recorded_run: tuple[Path, Any]) -> None:
    output, _ = recorded_run
    record = json.loads((output / "checkpoint-8" / ".ckptspec.next-batches-0.json").read_text())
    assert record["checkpoint"] == "checkpoint-8" and len(record["batches"]) == 4 and record["loader"]["samples"] == 20
    assert not (output / "checkpoint-12" / ".ckptspec.next-batches-0.json").exists(), "the run ended at its last save"
    assert audit([output]).passed


class _Reshuffled(Tokens):
    """The samples in another order, same length: a script that shuffles its data with an unseeded
    generator each time it starts."""

    def __init__(self) -> None:
        super().__init__()
        order = torch.randperm(len(self.ids), generator=torch.Generator().manual_seed(5))
        self.ids, self.labels = self.ids[order], self.labels[order]


def test_data_in_another_order_on_resume_is_named_at_the_first_batch(recorded_run: tuple[Path, Any], moved: Path) -> None:
    plain = resume(moved, checked=False, dataset=_Reshuffled())  # same length: the Trainer skips 3 batches of other samples
    assert differs(plain, recorded_run[1])
    message = refused(moved, dataset=_Reshuffled())
    assert re.search(r"data order: the resumed run \(rank 0\) does not draw the batches the run drew after this save: "
                     r"batch 0 after the resume is not batch 0 after the save \(CRC32C [0-9a-f]{8}, [0-9a-f]{8} in the run\)", message), message


def test_the_manifest_goes_with_its_checkpoint_under_save_total_limit(tmp_path: Path) -> None:
    output = tmp_path / "run"
    trainer(output, callbacks=[CkptspecCallback()], save_total_limit=1).train()
    assert sorted(path.relative_to(output).as_posix() for path in output.rglob(".ckptspec.yaml")) == ["checkpoint-12/.ckptspec.yaml"]
    assert validate(output / "checkpoint-12").passed


@pytest.mark.parametrize("removed", ["optimizer.pt", "scheduler.pt"])
def test_a_missing_optimizer_or_scheduler_file_is_named(recorded_run: tuple[Path, Any], moved: Path, removed: str) -> None:
    (moved / removed).unlink()
    plain = resume(moved, checked=False)  # no exception, nothing logged: both are skipped
    assert differs(plain, recorded_run[1])
    message = refused(moved)
    assert "optimizer.pt: the optimizer was not restored" in message and "scheduler.pt" in message


def test_a_missing_rng_file_is_named_at_the_first_step(recorded_run: tuple[Path, Any], moved: Path) -> None:
    (moved / "rng_state.pth").unlink()
    plain = resume(moved, checked=False)  # logged at INFO only; dropout differs
    assert differs(plain, recorded_run[1])
    assert "rng_state.pth: the random generators were not restored" in refused(moved)


@pytest.mark.parametrize(("options", "named"), [({"dataset": Tokens(length=26)}, "dataset_length 20 saved, 26 now"), ({"per_device_train_batch_size": 2}, "per_device_batch_size 4 saved, 2 now")])
def test_other_data_on_resume_is_named_with_both_positions(recorded_run: tuple[Path, Any], moved: Path, options: dict[str, Any], named: str) -> None:
    plain = resume(moved, checked=False, **options)
    assert differs(plain, recorded_run[1])
    message = refused(moved, **options)
    assert named in message and "had consumed" in message and "will skip" in message


def test_another_construction_config_is_named(recorded_run: tuple[Path, Any], moved: Path) -> None:
    plain = resume(moved, checked=False, net=model(layer_norm_eps=1e-3))  # 0 missing, 0 unexpected keys, no warning
    assert differs(plain, recorded_run[1])
    message = refused(moved, net=model(layer_norm_eps=1e-3))
    assert "config.json: layer_norm_eps is 1e-12 in the checkpoint, 0.001 in the model" in message
    assert "fingerprint: output" in message  # the replayed batch shows the difference too


def test_keys_a_non_strict_load_leaves_out_are_named(moved: Path) -> None:
    net = model()
    net.register_buffer("calibration", torch.zeros(3))
    message = refused(moved, net=net)
    assert "model: 1 tensors of the model are not in the checkpoint and keep their fresh values: calibration" in message


class _WarmRestart(TrainerCallback):
    """Sets AdamW's moments back to zero when training begins and keeps its step counts: the warm
    restart some scripts make on every resume."""

    def on_train_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        for parameter_state in optimizer.state.values():
            parameter_state["exp_avg"].zero_()
            parameter_state["exp_avg_sq"].zero_()


def test_moments_a_callback_resets_after_the_restore_are_named_at_the_first_step(recorded_run: tuple[Path, Any], moved: Path) -> None:
    plain = trainer(moved.parent.parent / "plain", callbacks=[_WarmRestart()])
    plain.train(resume_from_checkpoint=str(moved))  # no error, no warning
    assert differs(plain, recorded_run[1])

    checked = trainer(moved.parent.parent / "checked", callbacks=[_WarmRestart(), CkptspecCallback(fingerprint_batch=fingerprint_batch())])
    found = r"optimizer.pt: the optimizer state of '[\w.]+' is not the one saved before the first step \(CRC32C [0-9a-f]{8}, [0-9a-f]{8} when saved\); \d+ more of the \d+ parameters' states differ"
    with pytest.raises(RestoreError, match=found):
        checked.train(resume_from_checkpoint=str(moved))
    assert checked.state.global_step == RESUMED


def test_a_record_of_next_batches_that_is_a_fifo_is_named_not_waited_on(tmp_path: Path) -> None:
    output = tmp_path / "run"
    trainer(output, callbacks=[CkptspecCallback(fingerprint_batch=fingerprint_batch())]).train()
    record = output / "checkpoint-8" / ".ckptspec.next-batches-0.json"
    record.unlink()
    os.mkfifo(record)  # opened for reading, it would wait for a writer forever
    assert "not a regular file but a FIFO" in refused(output / "checkpoint-8")


def test_a_callback_whose_resume_was_refused_watches_the_next_trainers_model(recorded_run: tuple[Path, Any], moved: Path) -> None:
    callback = CkptspecCallback(fingerprint_batch=fingerprint_batch())
    first = trainer(moved.parent.parent / "first", callbacks=[callback], dataset=_Reshuffled())
    with pytest.raises(RestoreError, match="data order"):
        first.train(resume_from_checkpoint=str(moved))
    second = trainer(moved.parent.parent / "second", callbacks=[callback])
    second.train(resume_from_checkpoint=str(moved))
    assert callback.last_report is not None and callback.last_report["data_order"].status == "matched"
    assert not differs(second, recorded_run[1])
