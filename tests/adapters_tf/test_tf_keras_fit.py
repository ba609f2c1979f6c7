"""`model.fit` with the ckptspec callback: epoch-boundary resume is exact, and every save has its manifest."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from .tf_training import FINGERPRINT_BATCH, build_model

import ckptspec.tensorflow
from ckptspec import load_manifest, manifest_path_for

EPOCHS, RESUME_AT = 4, 2


def _data() -> tf.data.Dataset:
    features = tf.reshape(tf.range(32 * 4, dtype=tf.float32) % 5.0, (32, 4))
    return tf.data.Dataset.from_tensor_slices((features, tf.reduce_mean(features, axis=1))).batch(8)


def _compiled(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    return model


def _manager(directory: Path, model: keras.Model) -> ckptspec.tensorflow.CheckpointManager:
    return ckptspec.tensorflow.CheckpointManager(
        directory, model=model, optimizer=model.optimizer, fingerprint_batch=FINGERPRINT_BATCH
    )


def _weights(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(variable) for variable in model.variables]


def test_fit_resumed_from_an_epoch_checkpoint_equals_the_uninterrupted_fit(tmp_path: Path) -> None:
    uninterrupted = _compiled(seed=0)
    uninterrupted.fit(_data(), epochs=EPOCHS, verbose=0, shuffle=False)

    interrupted = _compiled(seed=0)
    callback = ckptspec.tensorflow.CheckpointCallback(_manager(tmp_path, interrupted), every_n_epochs=1)
    interrupted.fit(_data(), epochs=RESUME_AT, verbose=0, shuffle=False, callbacks=[callback])

    resumed = _compiled(seed=1)
    manager = _manager(tmp_path, resumed)
    report = manager.restore()
    resumed.fit(
        _data(),
        epochs=EPOCHS,
        initial_epoch=report.data_position["epoch"],
        verbose=0,
        shuffle=False,
        callbacks=[ckptspec.tensorflow.CheckpointCallback(manager)],
    )

    assert (report.data_position["epoch"], report.data_position["global_step"]) == (RESUME_AT, RESUME_AT * 4)
    assert report.fingerprint is not None and report.fingerprint.max_abs_difference == 0.0
    assert all(np.array_equal(a, b) for a, b in zip(_weights(resumed), _weights(uninterrupted), strict=True))
    assert [p.name for p in manager.checkpoints] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    assert load_manifest(manifest_path_for(manager.checkpoints[-1])).components.data_position.epoch == EPOCHS


def test_step_checkpoints_record_the_batch_in_the_epoch(tmp_path: Path) -> None:
    model = _compiled(seed=0)
    callback = ckptspec.tensorflow.CheckpointCallback(
        _manager(tmp_path, model), every_n_epochs=None, every_n_steps=3
    )
    model.fit(_data(), epochs=2, verbose=0, shuffle=False, callbacks=[callback])

    positions = [
        load_manifest(manifest_path_for(prefix)).components.data_position for prefix in callback.manager.checkpoints
    ]
    assert [(p.epoch, p.batch_in_epoch, p.global_step) for p in positions] == [(0, 3, 3), (1, 2, 6)]
