"""`ckptspec.keras.ManifestCallback` under a real `model.fit`, and the checked loads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ckptspec import validate
from ckptspec._documents import load_manifest
from ckptspec._sidecars import manifest_path_for
from ckptspec._exceptions import AdapterError, RestoreError

from .keras_written import BATCHES_PER_EPOCH, EPOCHS, SPEC, KerasRun, build_model, callbacks, data, training_metadata

keras = pytest.importorskip("keras")
np = pytest.importorskip("numpy")
ckptspec_keras = pytest.importorskip("ckptspec.keras")


def _spec(directory: Path) -> Path:
    path = directory / "spec.yaml"
    path.write_text(SPEC)
    return path


def _written(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.suffix in (".keras", ".h5"))


def test_a_manifest_beside_every_file_keras_wrote_and_nothing_else(keras_run: KerasRun) -> None:
    written = _written(keras_run.directory)
    manifests = sorted(keras_run.directory.rglob("*.ckptspec.yaml"))
    assert manifests == sorted(manifest_path_for(path) for path in written)
    # save_best_only: one archive per improved epoch; save_freq=3 over 12 batches: 4 weight files.
    assert [int(path.name[5:7]) for path in keras_run.best] == keras_run.improved_epochs
    assert len(keras_run.weights_only) == EPOCHS * BATCHES_PER_EPOCH // 3


def test_the_same_callbacks_without_ckptspec_write_the_same_files(keras_run: KerasRun) -> None:
    assert {path.name for path in _written(keras_run.plain)} <= {path.name for path in _written(keras_run.directory)}
    assert not list(keras_run.plain.rglob("*.ckptspec.yaml"))


def test_every_file_validates_clean(keras_run: KerasRun) -> None:
    for path in _written(keras_run.directory):
        result = validate(path)
        assert result.passed and not result.findings, [finding.message for finding in result.findings]
        assert result.format == "keras" and result.spec == "keras-run"


def test_manifests_record_the_position_keras_saved_at(keras_run: KerasRun) -> None:
    backup = load_manifest(manifest_path_for(keras_run.backup)).components.data_position
    metadata = training_metadata(keras_run.backup)
    assert (backup.epoch, backup.batch_in_epoch) == (metadata["epoch"], metadata["batch"] + 1)
    last = load_manifest(manifest_path_for(keras_run.best[-1]))
    assert last.components.data_position.epoch == keras_run.improved_epochs[-1]
    assert last.components.data_position.global_step == keras_run.improved_epochs[-1] * BATCHES_PER_EPOCH
    layers = {module.path: module for module in last.components.config.modules}
    assert layers["layers.1"].constants["epsilon"] == 1e-3


def test_a_damaged_copy_is_named_to_the_tensor(keras_run: KerasRun, tmp_path: Path) -> None:
    from ckptspec.formats.keras import open_keras

    for source in (keras_run.best[-1], keras_run.backup):
        copy = tmp_path / source.name
        shutil.copy(source, copy)
        shutil.copy(manifest_path_for(source), manifest_path_for(copy))
        with open_keras(copy) as keras_file:
            tensor = keras_file.tensors["layers/batch_normalization/vars/0"]
            offset = keras_file.byte_ranges(tensor)[0][0]
        damaged = bytearray(copy.read_bytes())
        damaged[offset + 1] ^= 0x40
        copy.write_bytes(bytes(damaged))
        findings = {finding.name: finding for finding in validate(copy).findings}
        assert findings["tensor-checksum-mismatch"].pointer == tensor.pointer


def test_overwritten_files_get_their_manifest_replaced_and_deleted_backups_lose_theirs(tmp_path: Path) -> None:
    x, y = data(np)
    model = build_model(keras)
    latest = keras.callbacks.ModelCheckpoint(str(tmp_path / "latest.keras"))
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=1, double_checkpoint=True)
    wrapped = ckptspec_keras.ManifestCallback(latest, backup, spec=_spec(tmp_path))
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[wrapped])
    manifest = load_manifest(manifest_path_for(tmp_path / "latest.keras"))
    assert manifest.components.data_position.epoch == 2
    assert validate(tmp_path / "latest.keras").passed
    assert not (tmp_path / "backup").exists()


def test_double_checkpoint_backups_carry_their_own_manifest(tmp_path: Path) -> None:
    x, y = data(np)
    backup = keras.callbacks.BackupAndRestore(
        str(tmp_path / "backup"), save_freq=1, double_checkpoint=True, delete_checkpoint=False
    )
    wrapped = ckptspec_keras.ManifestCallback(backup, spec=_spec(tmp_path))
    build_model(keras).fit(x, y, epochs=1, batch_size=16, verbose=0, callbacks=[wrapped])
    previous = tmp_path / "backup" / "latest.weights.h5.bkp"
    manifest = load_manifest(manifest_path_for(previous))
    assert manifest.checkpoint == previous.name
    assert manifest.components.data_position.batch_in_epoch == BATCHES_PER_EPOCH - 1
    assert validate(previous).findings == []


def test_a_rebuilt_model_with_another_epsilon_is_refused_at_load(keras_run: KerasRun) -> None:
    rebuilt = build_model(keras, epsilon=1e-2)
    rebuilt.optimizer.build(rebuilt.trainable_variables)
    before = [variable.numpy().copy() for variable in rebuilt.weights]
    with pytest.raises(RestoreError, match=r"layers\.1 \(BatchNormalization 'norm'\): epsilon is 0\.01 in the model but 0\.001"):
        ckptspec_keras.load_weights(rebuilt, keras_run.backup)
    assert all(np.array_equal(old, variable.numpy()) for old, variable in zip(before, rebuilt.weights))


def test_checked_loads_restore_what_was_saved(keras_run: KerasRun) -> None:
    rebuilt = build_model(keras)
    rebuilt.optimizer.build(rebuilt.trainable_variables)
    report = ckptspec_keras.load_weights(rebuilt, keras_run.backup)
    assert report.data_position["epoch"] == training_metadata(keras_run.backup)["epoch"]
    loaded = ckptspec_keras.load_model(keras_run.best[-1])
    assert loaded.layers[1].epsilon == 1e-3
    x, _ = data(np)
    expected = keras.models.load_model(keras_run.best[-1]).predict(x, verbose=0)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)


def test_load_model_refuses_an_archive_whose_config_was_edited(keras_run: KerasRun, tmp_path: Path) -> None:
    import json
    import zipfile

    copy = tmp_path / keras_run.best[-1].name
    with zipfile.ZipFile(keras_run.best[-1]) as old, zipfile.ZipFile(copy, "w") as new:
        for info in old.infolist():
            data_bytes = old.read(info.filename)
            if info.filename == "config.json":
                config = json.loads(data_bytes)
                config["config"]["layers"][2]["config"]["epsilon"] = 0.5
                data_bytes = json.dumps(config).encode()
            new.writestr(info, data_bytes)
    shutil.copy(manifest_path_for(keras_run.best[-1]), manifest_path_for(copy))
    with pytest.raises(RestoreError, match=r"CKS326 keras-config-mismatch: config.json: layer layers.1 \(BatchNormalization\): epsilon is 0.5"):
        ckptspec_keras.load_model(copy)


def test_specs_and_callbacks_it_cannot_honour_are_refused_up_front(keras_run: KerasRun, tmp_path: Path) -> None:
    strict = tmp_path / "strict.yaml"
    strict.write_text(keras_run.spec.read_text().replace("rng: {require: optional}", "rng: {require: required}"))
    with pytest.raises(AdapterError, match="components.rng is required"):
        ckptspec_keras.ManifestCallback(*callbacks(keras, tmp_path), spec=strict)
    with pytest.raises(AdapterError, match="EarlyStopping"):
        ckptspec_keras.ManifestCallback(keras.callbacks.EarlyStopping())


def test_backup_and_restore_resumes_only_into_a_model_built_as_the_saved_one(tmp_path: Path) -> None:
    x, y = data(np)
    spec = _spec(tmp_path)

    def fit(model: object, epochs: int) -> list[int]:
        started: list[int] = []
        backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False)
        seen = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: started.append(epoch))
        model.fit(x, y, epochs=epochs, batch_size=16, verbose=0, callbacks=[ckptspec_keras.ManifestCallback(backup, spec=spec), seen])
        return started

    assert fit(build_model(keras), epochs=1) == [0]
    with pytest.raises(RestoreError, match=r"epsilon is 0\.01 in the model but 0\.001 in the checkpoint"):
        fit(build_model(keras, epsilon=1e-2), epochs=2)
    assert fit(build_model(keras), epochs=2) == [1]


def test_a_functional_model_with_tensor_operations_and_bfloat16_weights(tmp_path: Path) -> None:
    import crc32c

    from ckptspec.formats.keras import open_keras

    inputs = keras.Input((6, 8))
    attended = keras.layers.MultiHeadAttention(2, 4)(inputs, inputs)
    mixed = keras.layers.LayerNormalization(epsilon=1e-5)(attended + inputs)  # `+` is an operation, not a layer
    outputs = keras.layers.Dense(1, dtype="bfloat16")(keras.layers.GlobalAveragePooling1D()(mixed))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    path = tmp_path / "functional.keras"
    x = np.random.default_rng(0).random((16, 6, 8), dtype=np.float32)
    callback = ckptspec_keras.ManifestCallback(keras.callbacks.ModelCheckpoint(str(path)), spec=_spec(tmp_path))
    model.fit(x, x[:, 0, :1], epochs=1, verbose=0, callbacks=[callback])
    assert validate(path).findings == []
    loaded = ckptspec_keras.load_model(path)
    kernel = loaded.layers[-1].kernel
    with open_keras(path) as keras_file:
        (stored,) = [t for t in keras_file.tensors.values() if t.dataset.dtype == "bfloat16" and t.component == "model" and t.dataset.shape == (8, 1)]
        assert keras_file.crc32c(stored) == crc32c.crc32c(np.asarray(kernel.numpy()).tobytes())


class _Preempted(keras.callbacks.Callback):
    """Ends `fit` with an error before the epoch `at`, as a preemption ends a job."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        if epoch == self.at:
            raise RuntimeError("preempted")


def test_a_run_resumed_by_backup_and_restore_is_one_run(tmp_path: Path) -> None:
    from ckptspec.lineage import judge_run

    x, y = data(np)
    spec = _spec(tmp_path)

    def fit(epochs: int, *others: object) -> None:
        every_epoch = keras.callbacks.ModelCheckpoint(str(tmp_path / "run" / "epoch-{epoch}.keras"))
        backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
        callback = ckptspec_keras.ManifestCallback(every_epoch, backup, spec=spec)
        build_model(keras).fit(x, y, epochs=epochs, batch_size=16, verbose=0, callbacks=[callback, *others])

    with pytest.raises(RuntimeError, match="preempted"):
        fit(4, _Preempted(at=2))
    fit(4)  # BackupAndRestore resumes at epoch 2, then deletes its backup
    judgement = judge_run([tmp_path / "run"])
    (unproven,) = judgement.report.findings  # Keras's callbacks see no batch
    assert (unproven.code, unproven.severity, Path(unproven.checkpoint).name) == ("CKS514", "info", "epoch-3.keras")
    assert "the resume was measured (optimizer), not its data order" in unproven.message
    assert len({facts.run for facts in judgement.graph.checkpoints}) == 1
    (resumed,) = [found for found in judgement.graph.links if found.resumed]
    assert (resumed.parent.checkpoint.name, resumed.child.checkpoint.name) == ("epoch-2.keras", "epoch-3.keras")


class _WarmUpAgain(keras.callbacks.Callback):
    """Sets the optimizer's iteration count back to 0 when training begins, to run a learning-rate
    warm-up again after every resume."""

    def on_train_begin(self, logs: object = None) -> None:
        self.model.optimizer.iterations.assign(0)


def test_an_iteration_count_reset_after_backup_and_restore_is_refused_at_the_first_batch(tmp_path: Path) -> None:
    x, y = data(np)
    spec = _spec(tmp_path)

    def fit(directory: Path, *others: keras.callbacks.Callback, checked: bool = True) -> keras.Model:
        backup = keras.callbacks.BackupAndRestore(str(directory / "backup"))
        watched = [ckptspec_keras.ManifestCallback(backup, spec=spec)] if checked else [backup]
        model = build_model(keras)
        model.fit(x, y, epochs=4, batch_size=16, verbose=0, callbacks=[*watched, *others])
        return model

    for directory in (tmp_path / "plain", tmp_path / "checked"):
        with pytest.raises(RuntimeError, match="preempted"):
            fit(directory, _Preempted(at=2))
    plain = fit(tmp_path / "plain", _WarmUpAgain(), checked=False)
    assert int(plain.optimizer.iterations.numpy()) == 2 * BATCHES_PER_EPOCH, "the resumed run counted from 0, without a word"
    with pytest.raises(RestoreError, match=rf"optimizer: its iteration count is 0 before the first step, {2 * BATCHES_PER_EPOCH} when saved"):
        fit(tmp_path / "checked", _WarmUpAgain())
