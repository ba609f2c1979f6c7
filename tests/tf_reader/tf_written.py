"""Bundles written by real TensorFlow, with what TensorFlow itself reads back from them."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TF_DTYPE_NAMES = {"half": "float16", "double": "float64"}


@dataclass(frozen=True)
class ExpectedTensor:
    dtype: str
    shape: tuple[int, ...]
    value: Any
    """numpy array as `tf.train.load_checkpoint(prefix).get_tensor(key)` returns it; None for variant."""


@dataclass(frozen=True)
class WrittenBundle:
    prefix: Path
    expected: dict[str, ExpectedTensor]
    facts: dict[str, Any] = field(default_factory=dict)
    """What the writing code knew: counts and shapes to check roles against."""

    def copy_to(self, directory: Path) -> Path:
        """Copy the bundle's files into `directory`; return the new prefix."""
        directory.mkdir(parents=True, exist_ok=True)
        for path in self.prefix.parent.glob(f"{self.prefix.name}.*"):
            shutil.copy(path, directory / path.name)
        return directory / self.prefix.name


def _expected(tf: Any, prefix: str) -> dict[str, ExpectedTensor]:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    expected = {}
    for key, shape in shapes.items():
        name = TF_DTYPE_NAMES.get(dtypes[key].name, dtypes[key].name)
        value = None if name == "variant" else reader.get_tensor(key)
        expected[key] = ExpectedTensor(name, tuple(shape), value)
    return expected


def _mixed_module(tf: Any) -> Any:
    model = tf.Module()
    model.kernel = tf.Variable(tf.reshape(tf.range(6, dtype=tf.float32) / 7.0, [2, 3]))
    model.double = tf.Variable([1.5, -2.25], dtype=tf.float64)
    model.counts = tf.Variable([[1, -2], [3, 4]], dtype=tf.int32)
    model.step = tf.Variable(2**40 + 3, dtype=tf.int64)
    model.mask = tf.Variable([True, False, True])
    model.names = tf.Variable([b"ab", b"", b"xyz", "\u00e9t\u00e9".encode()])
    model.brain = tf.Variable([0.5, -1.25, 3.0e20], dtype=tf.bfloat16)
    model.half = tf.Variable([[0.5, -65504.0]], dtype=tf.float16)
    model.pixels = tf.Variable([0, 255, 7], dtype=tf.uint8)
    model.waves = tf.Variable([1 + 2j, -3.5j], dtype=tf.complex64)
    model.empty = tf.Variable(tf.zeros([0, 4]))
    return model


def _checkpoint_save(tf: Any, root: Path) -> WrittenBundle:
    generator = tf.random.Generator.from_seed(7)
    generator.normal([3])
    iterator = iter(tf.data.Dataset.range(10).batch(2))
    next(iterator)
    checkpoint = tf.train.Checkpoint(model=_mixed_module(tf), rng=generator, iterator=iterator)
    checkpoint.save(str(root / "ckpt"))
    prefix = checkpoint.save(str(root / "ckpt"))
    return WrittenBundle(Path(prefix), _expected(tf, prefix), {"save_counter": int(checkpoint.save_counter.numpy())})


def _checkpoint_write(tf: Any, root: Path) -> WrittenBundle:
    model = tf.Module()
    model.weights = tf.Variable(tf.ones([4, 4]))
    prefix = tf.train.Checkpoint(model=model).write(str(root / "written"))
    return WrittenBundle(Path(prefix), _expected(tf, prefix))


def _manager(tf: Any, root: Path) -> WrittenBundle:
    model = tf.Module()
    model.weights = tf.Variable(tf.zeros([3]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(root / "managed"), max_to_keep=2)
    for step in range(3):
        model.weights.assign_add(tf.ones([3]))
        manager.save(checkpoint_number=step + 1)
    prefix = manager.latest_checkpoint
    return WrittenBundle(Path(prefix), _expected(tf, prefix), {"checkpoints": [Path(p) for p in manager.checkpoints]})


def _keras_adam(tf: Any, root: Path) -> WrittenBundle:
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam(1e-3)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    prefix = checkpoint.save(str(root / "keras"))
    facts = {
        "model_shapes": sorted(tuple(w.shape) for w in model.weights),
        "optimizer_variable_count": len(optimizer.variables) - 2,  # less iterations and learning rate
        "iterations": int(optimizer.iterations.numpy()),
    }
    return WrittenBundle(Path(prefix), _expected(tf, prefix), facts)


def _v1_slots(tf: Any, root: Path) -> WrittenBundle:
    variable = tf.Variable([1.0, 2.0])
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    optimizer.minimize(lambda: tf.reduce_sum(variable * variable), var_list=[variable])
    prefix = tf.train.Checkpoint(v=variable, opt=optimizer).write(str(root / "slots"))
    return WrittenBundle(Path(prefix), _expected(tf, prefix), {"slot_names": sorted(optimizer.get_slot_names())})


def _sharded(tf: Any, root: Path) -> WrittenBundle:
    model = tf.Module()
    model.a = tf.Variable(tf.reshape(tf.range(64 * 64, dtype=tf.float32), [64, 64]))
    model.b = tf.Variable(tf.fill([64, 64], 2.0))
    model.c = tf.Variable(tf.range(32, dtype=tf.int64))
    policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=20_000)
    options = tf.train.CheckpointOptions(experimental_sharding_callback=policy)
    prefix = tf.train.Checkpoint(model=model).write(str(root / "sharded"), options=options)
    shards = sorted(Path(prefix).parent.glob(f"{Path(prefix).name}.data-*"))
    return WrittenBundle(Path(prefix), _expected(tf, prefix), {"shard_files": shards})


def _tf1_saver(tf: Any, root: Path) -> WrittenBundle:
    partitions = 3
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        partitioner = tf.compat.v1.fixed_size_partitioner(partitions)
        weights = tf.compat.v1.get_variable("dense/w", shape=[10, 4], partitioner=partitioner)
        bias = tf.compat.v1.get_variable("dense/b", shape=[4], initializer=tf.compat.v1.ones_initializer())
        global_step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.reduce_sum(weights.as_tensor() ** 2) + tf.reduce_sum(bias)
        train = tf.compat.v1.train.AdamOptimizer(0.1).minimize(loss, global_step=global_step)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            prefix = saver.save(session, str(root / "model.ckpt"), global_step=global_step)
    return WrittenBundle(Path(prefix), _expected(tf, prefix), {"partitions": partitions, "partitioned": "dense/w"})


def _large(tf: Any, root: Path) -> WrittenBundle:
    model = tf.Module()
    model.big = tf.Variable(tf.fill([8 << 20], 0.5))
    model.other = tf.Variable(tf.ones([4 << 20]))
    prefix = tf.train.Checkpoint(model=model).write(str(root / "large"))
    return WrittenBundle(Path(prefix), {}, {"nbytes": 4 * (12 << 20)})


BUILDERS = {
    "checkpoint_save": _checkpoint_save,
    "checkpoint_write": _checkpoint_write,
    "manager": _manager,
    "keras_adam": _keras_adam,
    "v1_slots": _v1_slots,
    "sharded": _sharded,
    "tf1_saver": _tf1_saver,
    "large": _large,
}
COMPARED = [name for name in BUILDERS if name != "large"]
