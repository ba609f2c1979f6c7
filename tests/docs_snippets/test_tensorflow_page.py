"""The TensorFlow page's examples, run as written under the starter spec `ckptspec init` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import ckptspec.tensorflow  # noqa: E402
from ckptspec.cli import cli  # noqa: E402

from ._markdown import blocks, run_python  # noqa: E402

PAGE = "docs/adapters/tensorflow.md"


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    return model


def _dataset() -> tf.data.Dataset:
    features = tf.reshape(tf.range(16 * 4, dtype=tf.float32) % 5.0, (16, 4))
    return tf.data.Dataset.from_tensor_slices((features, tf.reduce_mean(features, axis=1))).batch(8)


def _reader_namespace(model: keras.Model) -> dict[str, Any]:
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)

    def train_step(batch: tuple[tf.Tensor, tf.Tensor]) -> None:
        features, targets = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(features + noise.normal(tf.shape(features), stddev=0.01), training=True)[:, 0] - targets) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    noise = tf.random.Generator.from_seed(1)
    return {
        "ckptspec": ckptspec,
        "model": model,
        "optimizer": optimizer,
        "noise": noise,
        "iterator": iter(_dataset().repeat()),
        "dataset": _dataset(),
        "x_fixed": np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4),
        "train_step": train_step,
        "steps": 3,
    }


@pytest.fixture()
def starter_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["init", "--framework", "tensorflow", "-o", "ckptspec.yaml"])
    assert result.exit_code == 0, result.output
    return tmp_path / "ckptspec.yaml"


def test_model_fit_example_saves_then_resumes(starter_spec: Path) -> None:
    (example,) = blocks(PAGE, "`model.fit`", "python")
    run_python(example, _reader_namespace(_model()))
    assert Path("runs/ckpts/ckpt-10.ckptspec.yaml").is_file()
    rerun = run_python(example, _reader_namespace(_model()))  # the same script started again resumes
    assert rerun["initial_epoch"] == 10


def test_custom_loop_example_saves_then_restores(starter_spec: Path) -> None:
    (example,) = blocks(PAGE, "A custom training loop", "python")
    first = run_python(example, _reader_namespace(_model()))
    assert first["manager"].latest_checkpoint is not None
    rerun = run_python(example, _reader_namespace(_model()))
    assert rerun["report"].restored[0] == "model" and rerun["report"].fingerprint_replayed
