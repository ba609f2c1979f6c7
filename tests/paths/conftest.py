"""Real files the path and discovery tests read, written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec.cli import cli


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="session")
def tf1_empty_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF1 `Saver` bundle saved to `dir/`: files `.index` and `.data-00000-of-00001`, as musicnn ships."""
    tf = pytest.importorskip("tensorflow")
    directory = tmp_path_factory.mktemp("musicnn")
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("conv/kernel", initializer=tf.reshape(tf.range(6.0), [2, 3]))
        tf.compat.v1.get_variable("conv/bias", initializer=tf.zeros([3]))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, f"{directory}/")
    assert (directory / ".index").is_file() and (directory / ".data-00000-of-00001").is_file()
    return directory


@pytest.fixture(scope="session")
def torch_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("torch") / "weights.pt"
    torch.save({"w": torch.ones(3)}, path)
    return path
