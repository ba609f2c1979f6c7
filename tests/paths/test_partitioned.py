"""Partitioned TensorFlow variables are streamed slice by slice, in the order TensorFlow reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckptspec.formats.tfbundle import Bundle, open_bundle


@pytest.fixture(scope="session")
def partitioned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A TF1 `Saver` bundle with one variable split along its rows and one along its columns."""
    tf = pytest.importorskip("tensorflow")
    prefix = tmp_path_factory.mktemp("partitioned") / "model.ckpt"
    graph = tf.Graph()
    with graph.as_default():
        for name, axis in (("rows", 0), ("columns", 1)):
            tf.compat.v1.get_variable(
                name,
                initializer=tf.reshape(tf.range(4 * 6, dtype=tf.float32), [4, 6]),
                partitioner=tf.compat.v1.fixed_size_partitioner(3, axis=axis),
            )
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix))
    reader = tf.train.load_checkpoint(str(prefix))
    return prefix, {name: reader.get_tensor(name).tobytes() for name in ("rows", "columns")}


@pytest.mark.parametrize("name", ["rows", "columns"])
def test_streamed_bytes_are_the_ones_tensorflow_reads(
    partitioned: tuple[Path, dict[str, Any]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, expected = partitioned
    bundle = open_bundle(prefix)
    assert len(bundle.entries[name].slices) == 3

    def refuse(*_args: object) -> bytes:
        raise AssertionError("assembled in memory")

    monkeypatch.setattr(Bundle, "_assemble", refuse)
    assert b"".join(bundle.iter_bytes(name)) == expected[name]
