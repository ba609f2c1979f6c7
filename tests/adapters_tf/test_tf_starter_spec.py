"""The documented `model.fit` usage: met by the starter spec of `ckptspec init --framework tensorflow`,
and refused when built with a fixed batch the model cannot take."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

import ckptspec.tensorflow
from ckptspec import AdapterError
from ckptspec.cli import cli

from .tf_training import FINGERPRINT_BATCH, build_model


def _compiled() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    return model


def _data() -> tf.data.Dataset:
    features = tf.reshape(tf.range(16 * 4, dtype=tf.float32) % 5.0, (16, 4))
    return tf.data.Dataset.from_tensor_slices((features, tf.reduce_mean(features, axis=1))).batch(8)


def test_tensorflow_starter_spec_is_met_by_model_fit_with_the_callback(tmp_path: Path) -> None:
    spec = tmp_path / "ckptspec.yaml"
    runner = CliRunner()
    result = runner.invoke(cli, ["init", "--name", "starter", "--framework", "tensorflow", "-o", str(spec)])
    assert result.exit_code == 0, result.output

    model = _compiled()
    manager = ckptspec.tensorflow.CheckpointManager(
        tmp_path / "ckpts", model=model, optimizer=model.optimizer, fingerprint_batch=FINGERPRINT_BATCH, spec=spec
    )
    model.fit(_data(), epochs=2, verbose=0, callbacks=[ckptspec.tensorflow.CheckpointCallback(manager, every_n_epochs=1)])
    result = runner.invoke(cli, ["validate", str(manager.latest_checkpoint)])
    assert result.exit_code == 0, result.output

    resumed = _compiled()
    manager = ckptspec.tensorflow.CheckpointManager(
        tmp_path / "ckpts", model=resumed, optimizer=resumed.optimizer, fingerprint_batch=FINGERPRINT_BATCH, spec=spec
    )
    report = manager.restore()
    assert report.data_position["epoch"] == 2 and report.fingerprint_replayed
    assert set(report.generators) == {"python", "numpy"}


def test_a_fixed_batch_the_model_cannot_take_is_refused_when_the_manager_is_built(tmp_path: Path) -> None:
    model = _compiled()
    with pytest.raises(AdapterError, match=r"CheckpointManager\(fingerprint_batch=\.\.\.\): the model cannot take the batch"):
        ckptspec.tensorflow.CheckpointManager(tmp_path, model=model, optimizer=model.optimizer, fingerprint_batch=np.zeros((2, 7), np.float32))
    assert not any(tmp_path.iterdir())
