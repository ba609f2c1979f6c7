"""Legacy `.h5` model saves written by real Keras (`model.save("x.h5")`, as Keras 2 users saved every model)."""

from __future__ import annotations

import os
from pathlib import Path


def write_legacy_saves(directory: Path) -> dict[str, Path]:
    """A fitted model with common layers, and one with a Lambda layer, each saved whole to `.h5`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np

    inputs = keras.Input((6,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8)(inputs)
    hidden = keras.layers.GRU(4)(hidden)
    hidden = keras.layers.BatchNormalization()(hidden)
    fitted = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dropout(0.1)(hidden)))
    fitted.compile("adam", "mse")
    fitted.fit(np.random.randint(0, 20, (8, 6)), np.random.randn(8, 1), epochs=1, verbose=0)
    features = keras.Input((4,))
    with_lambda = keras.Model(features, keras.layers.Dense(1)(keras.layers.Lambda(lambda t: t * 2)(features)))
    paths = {"fitted": directory / "fitted.h5", "lambda": directory / "lambda.h5"}
    fitted.save(paths["fitted"])
    with_lambda.save(paths["lambda"])
    return paths
