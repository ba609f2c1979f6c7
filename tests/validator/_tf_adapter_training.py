"""Train a tiny Keras model and save through `ckptspec.tensorflow.CheckpointManager`, in its own
process like `_tf_training.py`.

    python _tf_adapter_training.py OUT_DIR SPEC
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from ckptspec.tensorflow import CheckpointManager  # noqa: E402


def main(out: str, spec: str) -> None:
    tf.random.set_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(1e-2)
    generator = tf.random.Generator.from_seed(1)
    features, targets = generator.normal((8, 3)), generator.normal((8, 1))
    manager = CheckpointManager(
        out, model=model, optimizer=optimizer, generators={"data": generator}, fingerprint_batch=features[:2], spec=spec
    )
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(features) - targets) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        manager.save(batch_in_epoch=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
