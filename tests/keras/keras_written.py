"""Keras files written by Keras itself under `model.fit`, through ckptspec's callback and without it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC = """\
ckptspec: "1.0"
kind: spec
name: keras-run
framework: tensorflow
components:
  model: {require: required}
  config: {require: required}
  optimizer: {require: required}
  scheduler: {require: optional}
  rng: {require: optional}
  data_position: {require: required, fields: [epoch, global_step]}
  fingerprint: {require: optional}
"""

EPOCHS = 3
BATCHES_PER_EPOCH = 4


@dataclass
class KerasRun:
    directory: Path
    spec: Path
    model: Any
    weights_only: list[Path]
    """`.weights.h5` files ModelCheckpoint wrote every 3 batches (save_weights_only=True)."""
    best: list[Path]
    """`.keras` files ModelCheckpoint wrote with save_best_only (only epochs that improved)."""
    backup: Path
    """BackupAndRestore's `latest.weights.h5`."""
    plain: Path
    """A directory of files written by the same Keras callbacks without ckptspec's."""
    improved_epochs: list[int]


def build_model(keras: Any, epsilon: float = 1e-3) -> Any:
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu", name="hidden"),
            keras.layers.BatchNormalization(epsilon=epsilon, momentum=0.9, name="norm"),
            keras.layers.Dense(1, name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    return model


def data(np: Any) -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.random((16 * BATCHES_PER_EPOCH, 4), dtype=np.float32)
    return x, x.sum(axis=1, keepdims=True)


def callbacks(keras: Any, directory: Path) -> list[Any]:
    return [
        keras.callbacks.ModelCheckpoint(str(directory / "best-{epoch:02d}.keras"), monitor="loss", save_best_only=True),
        keras.callbacks.ModelCheckpoint(
            str(directory / "w-{epoch:02d}-{batch:02d}.weights.h5"), save_weights_only=True, save_freq=3
        ),
        keras.callbacks.BackupAndRestore(str(directory / "backup"), save_freq=2, delete_checkpoint=False),
    ]


def write_run(directory: Path) -> KerasRun:
    import keras
    import numpy as np

    import ckptspec.keras

    keras.utils.set_random_seed(0)
    spec = directory / "spec.yaml"
    spec.write_text(SPEC)
    x, y = data(np)
    losses: list[float] = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))
    model = build_model(keras)
    run_dir = directory / "run"
    wrapped = ckptspec.keras.ManifestCallback(*callbacks(keras, run_dir), spec=spec)
    model.fit(x, y, epochs=EPOCHS, batch_size=16, verbose=0, callbacks=[record, wrapped])
    plain = directory / "plain"
    build_model(keras).fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=callbacks(keras, plain))
    improved = [index + 1 for index, loss in enumerate(losses) if loss < min(losses[:index], default=float("inf"))]
    return KerasRun(
        directory=run_dir,
        spec=spec,
        model=model,
        weights_only=sorted(run_dir.glob("w-*.weights.h5")),
        best=sorted(run_dir.glob("best-*.keras")),
        backup=run_dir / "backup" / "latest.weights.h5",
        plain=plain,
        improved_epochs=improved,
    )


def training_metadata(backup: Path) -> dict[str, int]:
    return json.loads((backup.parent / "training_metadata.json").read_text())
