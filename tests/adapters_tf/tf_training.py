"""A tiny but complete custom training loop: every piece of state a resume has to bring back."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ckptspec.tensorflow
from ckptspec import Spec

FINGERPRINT_BATCH = np.linspace(-2.0, 2.0, 2 * 4, dtype=np.float32).reshape(2, 4)


def build_model(*, epsilon: float = 1e-3, units: int = 8) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.BatchNormalization(epsilon=epsilon),
            keras.layers.Dropout(0.25),
            keras.layers.Dense(1),
        ]
    )


def dataset() -> tf.data.Dataset:
    features = tf.reshape(tf.range(64 * 4, dtype=tf.float32) % 11.0, (64, 4))
    targets = tf.reduce_sum(features, axis=1) % 3.0
    return tf.data.Dataset.from_tensor_slices((features, targets)).shuffle(64, seed=7).batch(4).repeat()


@dataclass
class Run:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    generators: dict[str, tf.random.Generator]
    iterator: Any
    manager: ckptspec.tensorflow.CheckpointManager
    draws: list[np.ndarray] = field(default_factory=list)
    """What each step drew from Python's `random` and NumPy's global generator."""

    def train(self, steps: int) -> None:
        for _ in range(steps):
            features, targets = next(self.iterator)
            noise = sum(generator.normal(tf.shape(features), stddev=0.01) for generator in self.generators.values())
            # Augmentation as Python data pipelines do it: a random scale and NumPy jitter.
            scale = random.uniform(0.9, 1.1)
            jitter = np.random.normal(0.0, 0.01, size=features.shape).astype(np.float32)
            self.draws.append(np.append(jitter.ravel(), scale))
            with tf.GradientTape() as tape:
                predictions = self.model(features * scale + jitter + noise, training=True)[:, 0]
                loss = tf.reduce_mean((predictions - targets) ** 2)
            gradients = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))

    def state(self) -> dict[str, np.ndarray]:
        """Every value training depends on, by name: weights, seed states, slots, generators, next batch and draws."""
        # Positions, not Keras paths: a model rebuilt in the same process gets new auto-names.
        values = {f"model/{index}": np.asarray(v) for index, v in enumerate(self.model.variables)}
        values.update({f"optimizer/{index}": np.asarray(v) for index, v in enumerate(self.optimizer.variables)})
        values.update({f"generator/{name}": g.state.numpy() for name, g in self.generators.items()})
        features, targets = next(self.iterator)
        values.update({"next/features": features.numpy(), "next/targets": targets.numpy()})
        values.update({"next/python": np.array(random.random()), "next/numpy": np.random.random(3)})
        return values


def make_run(
    directory: Path,
    *,
    seed: int = 0,
    epsilon: float = 1e-3,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 0.01,
    beta_1: float = 0.9,
    generator_names: Sequence[str] = ("noise",),
    with_iterator: bool = True,
    with_optimizer: bool = True,
    spec: Spec | None = None,
    **manager_options: Any,
) -> Run:
    keras.utils.set_random_seed(seed)
    model = build_model(epsilon=epsilon)
    optimizer = keras.optimizers.Adam(learning_rate, beta_1=beta_1)
    generators = {name: tf.random.Generator.from_seed(seed * 100 + index) for index, name in enumerate(generator_names)}
    iterator = iter(dataset())
    manager = ckptspec.tensorflow.CheckpointManager(
        directory,
        model=model,
        optimizer=optimizer if with_optimizer else None,
        generators=generators,
        iterator=iterator if with_iterator else None,
        fingerprint_batch=FINGERPRINT_BATCH,
        spec=spec,
        **manager_options,
    )
    return Run(model, optimizer, generators, iterator, manager)


def assert_same_state(left: Mapping[str, np.ndarray], right: Mapping[str, np.ndarray]) -> None:
    assert sorted(left) == sorted(right)
    differing = [name for name in left if not np.array_equal(left[name], right[name])]
    assert differing == []
