"""Train a tiny Keras model with real TensorFlow and save bundles: run as a script, in its own process,
so the test process never imports TensorFlow next to torch.

    python _tf_training.py OUT_DIR

Writes OUT_DIR/run/ckpt-{1,2} with a `checkpoint` state file (CheckpointManager),
OUT_DIR/sharded/ckpt split over several data shards, and OUT_DIR/model_only/ckpt without the optimizer.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402


def main(out: str) -> None:
    tf.random.set_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(1e-2)
    features, targets = tf.random.normal((8, 3)), tf.random.normal((8, 1))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(out, "run"), max_to_keep=3)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(features) - targets) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        manager.save()
    sharding = tf.train.experimental.MaxShardSizePolicy(max_shard_size=64)
    checkpoint.write(os.path.join(out, "sharded", "ckpt"), options=tf.train.CheckpointOptions(experimental_sharding_callback=sharding))
    tf.train.Checkpoint(model=model).write(os.path.join(out, "model_only", "ckpt"))


if __name__ == "__main__":
    main(sys.argv[1])
