"""Real `Trainer.fit` runs: manifests beside every checkpoint, and each trap refused on resume."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ckptspec import AdapterError, RestoreError, Spec, load_manifest, manifest_path_for  # noqa: E402
from ckptspec.cli import cli  # noqa: E402
from ckptspec.lightning import CkptspecCallback, RestoreNote  # noqa: E402

from ._tiny import Net, seed_everything  # noqa: E402

FIXED_BATCH = torch.linspace(-2, 2, 24).reshape(6, 4)
STEPS_PER_EPOCH = 4


class TinyModule(pl.LightningModule):
    def __init__(self, lr: float = 1e-2, eps: float = 1e-5, classes: int = 3, scheduled: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = Net(eps=eps, classes=classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.cross_entropy(self(inputs + 0.01 * torch.randn_like(inputs)), targets)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        if not self.hparams.scheduled:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20)}

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(32, 4, generator=generator), torch.randint(0, 3, (32,), generator=generator))
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)


class ShapeFilteringModule(TinyModule):
    """The Lightning form of the trap: drop checkpoint tensors whose shape no longer fits, load the rest."""

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        current = self.state_dict()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if current[k].shape == v.shape}
        self.strict_loading = False


SPEC = Spec.model_validate({"name": "tiny-lightning", "components": {"scheduler": {"require": "required"}}})


def _trainer(root: Path, max_epochs: int, *callbacks, **options) -> pl.Trainer:
    return pl.Trainer(
        default_root_dir=root,
        max_epochs=max_epochs,
        callbacks=list(callbacks),
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **options,
    )


@pytest.fixture(scope="session")
def baseline(tmp_path_factory):
    """Two epochs with every checkpoint kept in every/, only the newest plus a last.ckpt link in latest/."""
    root = tmp_path_factory.mktemp("lightning")
    seed_everything(0)
    module = TinyModule()
    every = pl.callbacks.ModelCheckpoint(dirpath=root / "every", save_top_k=-1)
    latest = pl.callbacks.ModelCheckpoint(dirpath=root / "latest", save_top_k=1, monitor="step", mode="max", save_last="link")
    _trainer(root, 2, every, latest, CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH)).fit(module)
    return root, {name: tensor.clone() for name, tensor in module.state_dict().items()}


def _first_checkpoint(root: Path) -> Path:
    return root / "every" / f"epoch=0-step={STEPS_PER_EPOCH}.ckpt"


def test_manifests_follow_model_checkpoint_writes_removals_and_last_link(baseline):
    root, _ = baseline
    every = sorted(path.name for path in (root / "every").iterdir())
    assert every == [
        f"epoch=0-step={STEPS_PER_EPOCH}.ckpt", f"epoch=0-step={STEPS_PER_EPOCH}.ckpt.ckptspec.yaml",
        f"epoch=0-step={STEPS_PER_EPOCH}.ckpt.next-batches-0.json",  # the batches the second epoch began with
        f"epoch=1-step={2 * STEPS_PER_EPOCH}.ckpt", f"epoch=1-step={2 * STEPS_PER_EPOCH}.ckpt.ckptspec.yaml",
    ]
    newest = f"epoch=1-step={2 * STEPS_PER_EPOCH}.ckpt"
    assert sorted(path.name for path in (root / "latest").iterdir()) == sorted([newest, newest + ".ckptspec.yaml", "last.ckpt", "last.ckpt.ckptspec.yaml"])
    assert os.readlink(root / "latest" / "last.ckpt.ckptspec.yaml") == newest + ".ckptspec.yaml"

    manifest = load_manifest(manifest_path_for(root / "latest" / "last.ckpt"))
    components = manifest.components
    assert manifest.format == "lightning" and manifest.checkpoint == newest
    assert components.optimizer[0].at == "/optimizer_states/0" and components.scheduler[0].step == 2  # stepped once per epoch
    assert components.rng.generators[0].at == "/callbacks/CkptspecCallback/rng/python"
    assert (components.data_position.epoch, components.data_position.global_step) == (1, 2 * STEPS_PER_EPOCH)
    assert components.fingerprint.at == "/callbacks/CkptspecCallback/fingerprint"
    assert components.config.hyperparameters["lr"] == 1e-2
    saved = torch.load(root / "latest" / newest, weights_only=True)
    assert [entry.name for entry in components.model.tensors] == list(saved["state_dict"])


def test_complete_resume_is_bit_identical_to_the_uninterrupted_run(baseline, tmp_path):
    root, final_weights = baseline
    seed_everything(321)  # a new process, another seed: RNG must come from the checkpoint
    module = TinyModule()
    callback = CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH)
    _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(module, ckpt_path=_first_checkpoint(root))

    assert callback.last_report is not None and callback.last_report.fingerprint_replayed
    assert callback.last_report.tensors_loaded == callback.last_report.tensors_saved
    for name, tensor in final_weights.items():
        assert torch.equal(module.state_dict()[name], tensor), name


def _resume(root: Path, tmp_path: Path, module: TinyModule) -> None:
    callback = CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH)
    _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(module, ckpt_path=_first_checkpoint(root))


def test_batchnorm_eps_is_named_before_training_continues(baseline, tmp_path):
    root, _ = baseline
    with pytest.raises(RestoreError, match=re.escape("module 'net.bn' (BatchNorm1d): eps is 0.001 in the model being restored, 1e-05 when saved")):
        _resume(root, tmp_path, TinyModule(eps=1e-3))


def test_head_skipped_by_on_load_checkpoint_filter_is_reported(baseline, tmp_path):
    root, _ = baseline
    waived = Spec.model_validate({"name": "tiny-lightning", "components": {"config": {"ignore": ["net.head.*"]}}})
    with pytest.raises(RestoreError) as caught:
        callback = CkptspecCallback(spec=waived, fingerprint_batch=FIXED_BATCH)
        _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(ShapeFilteringModule(classes=5), ckpt_path=_first_checkpoint(root))
    message = str(caught.value)
    saved = len(TinyModule().state_dict())
    assert f"model: {saved - 2} of {saved} saved tensors were loaded" in message
    assert "net.head.weight (saved float32 [3, 8], model float32 [5, 8]), net.head.bias (saved float32 [3], model float32 [5])" in message


def test_new_lr_in_configure_optimizers_is_refused_then_applied_through_overrides(baseline, tmp_path):
    root, _ = baseline
    with pytest.raises(RestoreError, match=re.escape("optimizer 0 param group 0: lr is 0.001 in the optimizer being restored, 0.01 when saved")):
        _resume(root, tmp_path, TinyModule(lr=1e-3))

    rates = RateProbe()
    callback = CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH, overrides={"lr": 1e-3})
    _trainer(tmp_path, 2, rates, callback, enable_checkpointing=False).fit(TinyModule(lr=1e-3), ckpt_path=_first_checkpoint(root))
    saved_lr = torch.load(_first_checkpoint(root), weights_only=True)["optimizer_states"][0]["param_groups"][0]["lr"]
    (change,) = callback.last_report.changes
    assert (change.name, change.saved, change.applied) == ("lr", saved_lr, 1e-3)
    assert rates.seen[:3] == [1e-3] * 3  # the first three steps after the resume ran at the requested rate


class RateProbe(pl.Callback):
    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_index) -> None:
        self.seen.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_dropped_scheduler_is_refused(baseline, tmp_path):
    root, _ = baseline
    with pytest.raises(RestoreError, match=re.escape("scheduler: the checkpoint holds CosineAnnealingLR at step 1 and spec 'tiny-lightning' requires it to be restored")):
        _resume(root, tmp_path, TinyModule(scheduled=False))


def test_unknown_override_is_refused_before_training(baseline, tmp_path):
    root, _ = baseline
    callback = CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH, overrides={"bogus": 1})
    with pytest.raises(AdapterError, match=re.escape("overrides ['bogus'] name no setting of the optimizer")):
        _trainer(tmp_path, 2, RateProbe(), callback, enable_checkpointing=False).fit(TinyModule(), ckpt_path=_first_checkpoint(root))


def test_inspect_puts_the_callbacks_tensors_in_their_components(baseline):
    root, _ = baseline
    result = CliRunner().invoke(cli, ["inspect", "--format", "json", "--tensors", str(_first_checkpoint(root))])
    assert result.exit_code == 0, result.output
    tensors = json.loads(result.output)["tensors"]
    ours = {tensor["key"]: tensor["component"] for tensor in tensors if tensor["key"].startswith("/callbacks/CkptspecCallback/")}
    assert ours and set(ours.values()) == {"rng", "fingerprint"}
    assert all(component == pointer.split("/")[3] for pointer, component in ours.items())


def test_new_lr_hyperparameter_with_an_override_resumes_and_batch_size_is_reported(tmp_path):
    seed_everything(0)
    _trainer(tmp_path, 1, pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt"), CkptspecCallback(fingerprint_batch=FIXED_BATCH)).fit(BatchSized())
    (path,) = (tmp_path / "ckpt").glob("*.ckpt")
    callback = CkptspecCallback(fingerprint_batch=FIXED_BATCH, overrides={"lr": 1e-3})
    with pytest.warns(RestoreNote, match=re.escape("hyperparameters: batch_size is 16 in the run being resumed, 8 when saved")):
        _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(BatchSized(lr=1e-3, batch_size=16), ckpt_path=path)
    assert [(change.name, change.saved, change.applied) for change in callback.last_report.changes] == [("lr", 1e-2, 1e-3)]
    assert not any("lr" in note.split(":")[1] for note in callback.last_report.notes if note.startswith("hyperparameters"))


class BatchSized(TinyModule):
    """Keeps its run settings as hyper-parameters and attributes, as LightningModules often do."""

    def __init__(self, lr: float = 1e-2, batch_size: int = 8) -> None:
        super().__init__(lr=lr, scheduled=False)
        self.save_hyperparameters()
        self.learning_rate = lr
        self.batch_size = batch_size


def test_optional_scheduler_dropped_on_resume_is_refused_unless_the_spec_lets_it_drop(tmp_path):
    seed_everything(0)
    default = Spec.model_validate({"name": "defaults"})
    _trainer(tmp_path, 1, pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt"), CkptspecCallback(spec=default, fingerprint_batch=FIXED_BATCH)).fit(TinyModule())
    (path,) = (tmp_path / "ckpt").glob("*.ckpt")
    with pytest.raises(RestoreError, match=re.escape("to drop it on purpose: components.scheduler.on_resume: may_drop")):
        _trainer(tmp_path, 2, CkptspecCallback(fingerprint_batch=FIXED_BATCH), enable_checkpointing=False).fit(TinyModule(scheduled=False), ckpt_path=path)

    dropping = Spec.model_validate({"name": "defaults", "components": {"scheduler": {"require": "optional", "on_resume": "may_drop"}}})
    callback = CkptspecCallback(spec=dropping, fingerprint_batch=FIXED_BATCH)
    with pytest.warns(RestoreNote, match="scheduler: held by the checkpoint, not restored"):
        _trainer(tmp_path, 2, callback, enable_checkpointing=False).fit(TinyModule(scheduled=False), ckpt_path=path)
    assert callback.last_report.not_restored == ("scheduler",)


class _OwnCheckpointIO(pl.plugins.CheckpointIO):
    """A CheckpointIO of the program's own, which writes a file of its own beside each checkpoint."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        with open(path, "wb") as file:
            torch.save(checkpoint, file)
        Path(f"{path}.sha").write_text("written by the program's own CheckpointIO")

    def load_checkpoint(self, path, map_location=None, weights_only=False):
        return torch.load(path, map_location=map_location, weights_only=False)

    def remove_checkpoint(self, path) -> None:
        os.remove(path)


def test_a_checkpoint_io_of_the_programs_own_is_committed_with_the_manifest_and_its_own_files_kept(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    every_epoch = pl.callbacks.ModelCheckpoint(dirpath=directory, save_last=True, save_top_k=-1)
    seed_everything(0)
    _trainer(tmp_path, 2, CkptspecCallback(), every_epoch, plugins=[_OwnCheckpointIO()]).fit(TinyModule())
    saved = sorted(path.name for path in directory.iterdir())
    assert saved == [
        "epoch=0-step=4.ckpt", "epoch=0-step=4.ckpt.ckptspec.yaml", "epoch=0-step=4.ckpt.next-batches-0.json", "epoch=0-step=4.ckpt.sha",
        "epoch=1-step=8.ckpt", "epoch=1-step=8.ckpt.ckptspec.yaml", "epoch=1-step=8.ckpt.sha",
        "last.ckpt", "last.ckpt.ckptspec.yaml", "last.ckpt.sha",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, ["audit", str(directory)])
    assert result.exit_code == 0, result.output
    resumed = _trainer(tmp_path, 3, CkptspecCallback(), plugins=[_OwnCheckpointIO()])
    resumed.fit(TinyModule(), ckpt_path=directory / "last.ckpt")  # the callback refuses a resume its manifest does not vouch for
    assert resumed.global_step == 12


def test_an_async_checkpoint_io_commits_each_file_with_its_manifest_in_its_thread(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    every_epoch = pl.callbacks.ModelCheckpoint(dirpath=directory, save_last=True, save_top_k=-1)
    seed_everything(0)
    _trainer(tmp_path, 2, CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH), every_epoch, plugins=[pl.plugins.AsyncCheckpointIO()]).fit(TinyModule())
    saved = sorted(path.name for path in directory.iterdir())
    assert saved == [
        "epoch=0-step=4.ckpt", "epoch=0-step=4.ckpt.ckptspec.yaml", "epoch=1-step=8.ckpt", "epoch=1-step=8.ckpt.ckptspec.yaml",
        "last.ckpt", "last.ckpt.ckptspec.yaml",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, ["audit", str(directory)])
    assert result.exit_code == 0, result.output  # each manifest describes the bytes its file holds
    resumed = _trainer(tmp_path / "resumed", 2, CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH), plugins=[pl.plugins.AsyncCheckpointIO()])
    with pytest.warns(RestoreNote, match="data order not checked: no record of the batches drawn after it was saved"):
        resumed.fit(TinyModule(), ckpt_path=directory / "epoch=0-step=4.ckpt")
    assert resumed.global_step == 8


def test_an_exported_program_under_an_async_checkpoint_io_is_refused_before_training(tmp_path: Path) -> None:
    callback = CkptspecCallback(fingerprint_batch=FIXED_BATCH, export_program=True)
    trainer = _trainer(tmp_path, 1, callback, plugins=[pl.plugins.AsyncCheckpointIO()])
    with pytest.raises(AdapterError, match="export_program cannot follow an AsyncCheckpointIO"):
        trainer.fit(TinyModule())
