"""Lightning checkpoints from real Trainer.fit runs: same tree as torch.load, and a typed view that agrees."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from ._torch_compare import assert_same_tree  # noqa: E402

from ckptspec.formats.lightning import LightningCheckpoint  # noqa: E402
from ckptspec.formats.torchzip import inspect_torch_checkpoint, open_torch_checkpoint
from ckptspec.formats._tensors import TensorRef


def _view(path: Path) -> tuple[LightningCheckpoint, dict]:
    with open_torch_checkpoint(path) as checkpoint:
        view = LightningCheckpoint.recognise(checkpoint.tree)
    assert view is not None
    return view, torch.load(path, weights_only=False)


def test_corpus_has_the_files_the_fit_should_write(lightning_corpus: dict[str, Path]) -> None:
    names = set(lightning_corpus)
    assert {"last.ckpt", "weights_only.ckpt", "manual.ckpt", "step=3.ckpt"} <= names
    assert any(name.startswith("epoch=1-step=8") for name in names)


def test_every_checkpoint_reads_as_torch_load_does(lightning_corpus: dict[str, Path]) -> None:
    for name, path in lightning_corpus.items():
        theirs = torch.load(path, weights_only=False)
        with open_torch_checkpoint(path) as checkpoint:
            assert checkpoint.archive_root == "archive"
            assert assert_same_tree(checkpoint.tree, theirs) == sum(1 for _ in checkpoint.tensors()), name


def test_view_exposes_what_lightning_saved(lightning_corpus: dict[str, Path]) -> None:
    view, theirs = _view(lightning_corpus["last.ckpt"])
    assert view.version == theirs["pytorch-lightning_version"]
    assert (view.epoch, view.global_step) == (theirs["epoch"], theirs["global_step"])
    assert set(view.state_dict) == set(theirs["state_dict"])
    assert all(isinstance(value, TensorRef) for value in view.state_dict.values())
    assert view.scaler == theirs["MixedPrecision"] and view.precision.key == "MixedPrecision"
    assert set(view.callbacks) == set(theirs["callbacks"])
    assert {c.class_name for c in view.callbacks.values()} == {"EarlyStopping", "ModelCheckpoint"}
    assert len(view.callbacks_of("ModelCheckpoint")) == 2
    assert view.hyper_parameters.values == dict(theirs["hyper_parameters"])
    assert view.hyper_parameters.name == "kwargs"
    assert view.datamodule_hyper_parameters.values == dict(theirs["datamodule_hyper_parameters"])
    assert view.datamodule_state() == theirs["LitData"] == view.datamodule_state("LitData")
    assert [s["last_epoch"] for s in view.lr_schedulers] == [s["last_epoch"] for s in theirs["lr_schedulers"]]
    (adam,) = view.optimizer_states
    assert set(adam.tensors) == {(pid, name) for pid, s in theirs["optimizer_states"][0]["state"].items() for name in s}
    assert adam.learning_rates == [g["lr"] for g in theirs["optimizer_states"][0]["param_groups"]]
    assert not view.weights_only


def test_fit_progress_matches_the_loop_counters(lightning_corpus: dict[str, Path]) -> None:
    for name, path in lightning_corpus.items():
        view, theirs = _view(path)
        fit_loop = theirs["loops"]["fit_loop"]
        progress = view.fit_progress
        assert progress.epoch == fit_loop["epoch_progress"]["current"]["completed"], name
        assert progress.batch_in_epoch == fit_loop["epoch_loop.batch_progress"]["current"]["completed"], name
        assert progress.global_step == theirs["global_step"], name
    assert _view(lightning_corpus["manual.ckpt"])[0].fit_progress.optimization == "manual"
    # Saved from on_train_batch_end: the third batch is ready and processed but not yet completed.
    mid_epoch = _view(lightning_corpus["step=3.ckpt"])[0].fit_progress
    assert (mid_epoch.batch_tracker.ready, mid_epoch.batch_in_epoch, mid_epoch.is_last_batch) == (3, 2, False)


def test_weights_only_checkpoint_keeps_loops_and_hparams(lightning_corpus: dict[str, Path]) -> None:
    view, theirs = _view(lightning_corpus["weights_only.ckpt"])
    assert view.weights_only and view.optimizer_states == [] and view.callbacks == {} and view.scaler is None
    assert view.fit_progress.global_step == theirs["global_step"]
    assert view.hyper_parameters is not None


def test_inspection_summarises_components_and_progress(lightning_corpus: dict[str, Path]) -> None:
    inspection = inspect_torch_checkpoint(lightning_corpus["last.ckpt"])
    theirs = torch.load(lightning_corpus["last.ckpt"], weights_only=False)
    assert inspection.format == "lightning"
    assert inspection.components["model"] == "/state_dict" and inspection.components["scaler"] == "/MixedPrecision"
    assert inspection.metadata["global_step"] == theirs["global_step"]
    assert inspection.metadata["lightning_version"] == theirs["pytorch-lightning_version"]
    model = next(c for c in inspection.component_summaries() if c.name == "model")
    assert model.tensor_count == len(theirs["state_dict"])
    assert model.nbytes == sum(t.numel() * t.element_size() for t in theirs["state_dict"].values())
    assert {g.safety for g in inspection.globals} == {"allowed"}
