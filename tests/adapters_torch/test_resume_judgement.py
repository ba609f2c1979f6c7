"""What a resume refuses and what it only reports (layer constants against hyper-parameters,
moved classes, training state dropped on purpose or by accident), and a fixed batch refused at save."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import AdapterError, RestoreError, Spec  # noqa: E402
from ckptspec.torch import RestoreNote  # noqa: E402

from ._tiny import Net, seed_everything, train_step  # noqa: E402

LENIENT = {"data_position": {"require": "optional"}, "fingerprint": {"require": "optional"}}


def _spec(**components: dict) -> Spec:
    return Spec.model_validate({"name": "judged", "components": {**LENIENT, **components}})


class Classifier(torch.nn.Module):
    """A user model that keeps its run settings as attributes, as many training scripts do."""

    def __init__(self, learning_rate: float = 1e-2, batch_size: int = 16, eps: float = 1e-5) -> None:
        super().__init__()
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.net = Net(eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _saved_classifier(path: Path, fixed_batch: torch.Tensor) -> None:
    seed_everything(0)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=model.learning_rate)
    train_step(model, optimizer)
    ckpt.save(path, model=model, optimizer=optimizer, fingerprint_batch=fixed_batch, spec=_spec())


def test_constants_and_attributes_are_recorded_apart(tmp_path, fixed_batch):
    _saved_classifier(tmp_path / "c.pt", fixed_batch)
    modules = {module.path: module for module in ckpt.load(tmp_path / "c.pt").manifest.components.config.modules}
    assert modules[""].attributes == {"batch_size": 16, "learning_rate": 1e-2}
    assert "learning_rate" not in modules[""].constants
    assert modules["net.bn"].constants["eps"] == 1e-5 and modules["net.bn"].attributes == {}
    assert modules["net.drop"].constants["p"] == 0.1


def test_new_learning_rate_with_an_override_and_new_batch_size_restore(tmp_path, fixed_batch):
    _saved_classifier(tmp_path / "c.pt", fixed_batch)
    model = Classifier(learning_rate=1e-3, batch_size=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.warns(RestoreNote, match=re.escape("batch_size is 32 in the model being restored, 16 when saved")):
        report = ckpt.restore(tmp_path / "c.pt", model=model, optimizer=optimizer, overrides={"lr": 1e-3})
    assert [(change.name, change.saved, change.applied) for change in report.changes] == [("lr", 1e-2, 1e-3)]
    assert [note for note in report.notes if "learning_rate" in note] == []  # the override covers it
    assert any("batch_size" in note and "not refused" in note for note in report.notes)
    assert optimizer.param_groups[0]["lr"] == 1e-3


def test_a_refused_constant_names_the_spec_key_that_allows_it(tmp_path, fixed_batch):
    _saved_classifier(tmp_path / "c.pt", fixed_batch)
    model = Classifier(eps=1e-3)
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "c.pt", model=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-2))
    assert (
        "module 'net.bn' (BatchNorm1d): eps is 0.001 in the model being restored, 1e-05 when saved; "
        'to allow it: components.config.ignore: ["net.bn.eps"]'
    ) in str(caught.value)

    allowing = _spec(config={"ignore": ["net.bn.eps"]}, fingerprint={"require": "forbidden"})
    original = Classifier()
    ckpt.save(tmp_path / "quiet.pt", model=original, optimizer=torch.optim.Adam(original.parameters()), spec=allowing)
    model = Classifier(eps=1e-3)
    report = ckpt.restore(tmp_path / "quiet.pt", model=model, optimizer=torch.optim.Adam(model.parameters()))
    assert report.restored[0] == "model"


MODEL_SOURCE = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)
"""


def _import_as(name: str, path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(MODEL_SOURCE))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_same_class_imported_under_another_module_path_is_a_note(tmp_path, fixed_batch):
    flat = _import_as("models", tmp_path / "flat" / "models.py")
    packaged = _import_as("proj.models", tmp_path / "proj" / "models.py")
    try:
        saved = flat.Model()
        ckpt.save(tmp_path / "m.pt", model=saved, fingerprint_batch=fixed_batch, spec=_spec(optimizer={"require": "optional"}))
        model = packaged.Model()
        with pytest.warns(RestoreNote, match=re.escape("is a proj.models.Model in the model being restored, a models.Model when saved")):
            report = ckpt.restore(tmp_path / "m.pt", model=model)
        assert report.fingerprint_replayed and report.tensors_loaded == report.tensors_saved
    finally:
        del sys.modules["models"], sys.modules["proj.models"]


def _scheduled_run(path: Path, spec: Spec) -> None:
    model = Net(dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    train_step(model, optimizer, scheduler)
    ckpt.save(path, model=model, optimizer=optimizer, scheduler=scheduler, spec=spec)


def test_an_optional_scheduler_the_resume_drops_is_refused_unless_the_spec_lets_it_drop(tmp_path):
    _scheduled_run(tmp_path / "s.pt", _spec())
    model = Net(dropout=0.0)
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "s.pt", model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert "scheduler: the checkpoint holds StepLR at step 1, but the restore was given none" in str(caught.value)
    assert "components.scheduler.on_resume: may_drop" in str(caught.value)

    _scheduled_run(tmp_path / "drop.pt", _spec(scheduler={"require": "optional", "on_resume": "may_drop"}))
    model = Net(dropout=0.0)
    with pytest.warns(RestoreNote, match="scheduler: held by the checkpoint, not restored"):
        report = ckpt.restore(tmp_path / "drop.pt", model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert report.not_restored == ("scheduler",)


def test_a_changed_optimizer_setting_names_the_override_and_the_spec_key(tmp_path, fixed_batch):
    _saved_classifier(tmp_path / "c.pt", fixed_batch)
    model = Classifier()
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "c.pt", model=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-6))
    assert (
        "optimizer 0 param group 0: eps is 1e-06 in the optimizer being restored, 1e-08 when saved; loading would silently "
        "bring back 1e-08. To change it, pass overrides={'eps': 1e-06} (applied after loading) and list it in "
        "components.optimizer.overridable (now ['lr']); to keep it, build the optimizer with 1e-08"
    ) in str(caught.value)


def test_a_fixed_batch_the_model_cannot_take_names_the_argument_and_writes_nothing(tmp_path):
    model = Classifier()
    with pytest.raises(AdapterError, match=r"ckptspec.torch.save\(fingerprint_batch=\.\.\.\): Classifier.forward cannot take the batch: RuntimeError"):
        ckpt.save(tmp_path / "c.pt", model=model, fingerprint_batch=torch.zeros(2, 7))
    assert list(tmp_path.iterdir()) == []
