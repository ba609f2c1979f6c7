"""`ckptspec.tensorflow.CheckpointManager` saving through TensorFlow's sharding callback: a bundle in
many data files, with tensors larger than a shard sliced across them, gets a manifest that
validates, restores, and names the shard that was damaged.

The dataset iterator is not saved: TensorFlow's sharding callback cannot slice its state (a variant
tensor has no CPU kernel for `Slice`), whatever ckptspec does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from ckptspec import load_manifest, manifest_path_for, validate  # noqa: E402
from ckptspec.formats.tfbundle import open_bundle  # noqa: E402

from ..adapters_tf.tf_training import Run, assert_same_state, make_run  # noqa: E402

STEPS = 2
MAX_SHARD_BYTES = 64
"""Smaller than the first Dense kernel (4 × 8 float32), so that tensor is sliced across shards."""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    directory = tmp_path_factory.mktemp("tf-sharded")
    policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=MAX_SHARD_BYTES)
    options = tf.train.CheckpointOptions(experimental_sharding_callback=policy)
    run = make_run(directory / "sharded", with_iterator=False, options=options)
    run.train(STEPS)
    prefix = run.manager.save()
    return {"directory": directory, "prefix": prefix, "expected": _saved_values(run)}


def _saved_values(run: Run) -> dict[str, np.ndarray]:
    """What the bundle holds of the run: weights, optimizer slots and generator states, by position."""
    values = {f"model/{index}": np.asarray(v) for index, v in enumerate(run.model.variables)}
    values.update({f"optimizer/{index}": np.asarray(v) for index, v in enumerate(run.optimizer.variables)})
    values.update({f"generator/{name}": g.state.numpy() for name, g in run.generators.items()})
    return values


def _data_files(prefix: Path) -> list[Path]:
    return sorted(prefix.parent.glob(f"{prefix.name}.data-*"))


def test_every_shard_is_in_the_manifest_and_the_bundle_validates(saved: dict) -> None:
    prefix = saved["prefix"]
    shards = _data_files(prefix)
    assert len(shards) > 3
    assert any(entry.slices for entry in open_bundle(prefix).entries.values())  # tensors split across shards
    recorded = {entry.path for entry in load_manifest(manifest_path_for(prefix)).files}
    assert {shard.name for shard in shards} <= recorded
    assert [finding for finding in validate(prefix).findings if finding.severity == "error"] == []


def test_the_sharded_bundle_restores_every_value(saved: dict) -> None:
    resumed = make_run(saved["directory"] / "sharded", seed=1, with_iterator=False)
    resumed.manager.restore()
    assert_same_state(_saved_values(resumed), saved["expected"])


def test_a_damaged_shard_is_named(saved: dict, tmp_path: Path) -> None:
    prefix = saved["prefix"]
    copy = Path(shutil.copytree(prefix.parent, tmp_path / "copy")) / prefix.name
    shard = max(_data_files(copy), key=lambda path: path.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    errors = [finding for finding in validate(copy).findings if finding.severity == "error"]
    assert errors and any(shard.name in finding.message for finding in errors), errors
