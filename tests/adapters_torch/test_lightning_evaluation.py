"""The callback outside a plain resume: a fixed batch the model cannot take, and evaluation of
checkpoints written without ckptspec."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ckptspec import AdapterError, RestoreError, load_manifest, manifest_path_for  # noqa: E402
from ckptspec.torch import RestoreNote  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

from ._tiny import seed_everything  # noqa: E402
from .test_lightning import FIXED_BATCH, TinyModule, _trainer  # noqa: E402


class EvaluatedModule(TinyModule):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        loss = torch.nn.functional.cross_entropy(self(inputs), targets)
        self.log("val_loss", loss)
        return loss

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        return self(batch[0])

    def val_dataloader(self):
        return self.train_dataloader()


@pytest.fixture(scope="session")
def plain_checkpoint(tmp_path_factory):
    """A checkpoint Lightning wrote without ckptspec: no manifest beside it."""
    root = tmp_path_factory.mktemp("plain")
    seed_everything(0)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=root / "ckpt")
    _trainer(root, 1, checkpoints).fit(EvaluatedModule())
    (path,) = (root / "ckpt").glob("*.ckpt")
    return path


def test_a_fixed_batch_the_model_cannot_take_fails_at_setup_naming_the_argument(tmp_path):
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt")
    callback = CkptspecCallback(fingerprint_batch=torch.zeros(6, 7))  # the model takes 4 features
    module = TinyModule()
    with pytest.raises(AdapterError, match=r"CkptspecCallback\(fingerprint_batch=\.\.\.\): TinyModule.forward cannot take the batch"):
        _trainer(tmp_path, 1, checkpoints, callback).fit(module)
    assert module.global_step == 0 and not (tmp_path / "ckpt").exists()


def test_the_fixed_batch_trial_leaves_training_mode_and_generators_alone(tmp_path):
    module = TinyModule()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    CkptspecCallback(fingerprint_batch=FIXED_BATCH).setup(_trainer(tmp_path, 1), module, "fit")
    assert torch.equal(torch.rand(3), expected) and module.training


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluating_a_checkpoint_without_manifest_is_not_blocked(plain_checkpoint, tmp_path, stage):
    module = EvaluatedModule()
    module.test_step = module.validation_step
    module.test_dataloader = module.val_dataloader
    module.predict_dataloader = module.val_dataloader
    callback = CkptspecCallback(fingerprint_batch=FIXED_BATCH)
    with pytest.warns(RestoreNote, match="no manifest beside it: loaded for evaluation without checks"):
        getattr(_trainer(tmp_path, 1, callback), stage)(module, ckpt_path=plain_checkpoint)
    saved = torch.load(plain_checkpoint, weights_only=True)["state_dict"]
    assert all(torch.equal(module.state_dict()[name], tensor) for name, tensor in saved.items())
    assert callback.last_report is None


def test_resuming_training_from_a_checkpoint_without_manifest_says_how_to_adopt_it(plain_checkpoint, tmp_path):
    callback = CkptspecCallback(fingerprint_batch=FIXED_BATCH)
    with pytest.raises(RestoreError, match=f"ckptspec manifest {plain_checkpoint}"):
        _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(EvaluatedModule(), ckpt_path=plain_checkpoint)


class CallableHyperparameter(TinyModule):
    """A hyper-parameter with no JSON form, as modules that take an activation function have."""

    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters({"activation": torch.nn.functional.gelu, "lr": 1e-2})


def test_a_hyperparameter_with_no_json_form_is_listed_as_unknown(tmp_path):
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt")
    _trainer(tmp_path, 1, checkpoints, CkptspecCallback(fingerprint_batch=FIXED_BATCH)).fit(CallableHyperparameter())
    (path,) = (tmp_path / "ckpt").glob("*.ckpt")
    manifest = load_manifest(manifest_path_for(path))
    assert manifest.components.config.hyperparameters["lr"] == 1e-2
    assert manifest.unknown == ["config.hyperparameters.activation: a builtin_function_or_method, which has no JSON form"]
