"""Everything the reader says about bundles written by TensorFlow 2.21 agrees with TensorFlow's own reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from .tf_written import COMPARED, WrittenBundle

from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.tf_state import latest_checkpoint, list_checkpoints
from ckptspec.formats.tfbundle import OBJECT_GRAPH_KEY, Bundle, open_bundle, verify_bundle

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.tensorflow


@pytest.fixture(params=COMPARED)
def written(request: pytest.FixtureRequest, tf_bundles: dict[str, WrittenBundle]) -> WrittenBundle:
    return tf_bundles[request.param]


def _as_array(bundle: Bundle, key: str) -> Any:
    entry = bundle.entries[key]
    return np.array(bundle.decode(key), dtype=object).reshape(entry.shape)


def test_keys_dtypes_and_shapes_match_tensorflow(written: WrittenBundle) -> None:
    bundle = open_bundle(written.prefix)
    assert set(bundle.entries) == set(written.expected)
    for key, expected in written.expected.items():
        assert (bundle.entries[key].dtype.name, bundle.entries[key].shape) == (expected.dtype, expected.shape), key


def test_values_match_tensorflow(written: WrittenBundle) -> None:
    bundle = open_bundle(written.prefix)
    for key, expected in written.expected.items():
        if expected.dtype == "variant":
            continue
        ours = _as_array(bundle, key)
        if expected.dtype == "string":
            assert ours.tolist() == np.asarray(expected.value, dtype=object).tolist(), key
        else:
            theirs = np.asarray(expected.value)
            if expected.dtype == "bfloat16":
                theirs = theirs.astype(np.float32)
            np.testing.assert_array_equal(ours.astype(theirs.dtype), theirs, err_msg=key)


def test_raw_bytes_match_tensorflow(written: WrittenBundle) -> None:
    bundle = open_bundle(written.prefix)
    for key, expected in written.expected.items():
        if bundle.entries[key].dtype.is_pod:
            assert bundle.read_bytes(key) == np.ascontiguousarray(expected.value).tobytes(), key


def test_every_checksum_verifies(written: WrittenBundle) -> None:
    assert verify_bundle(written.prefix) == []


def test_one_worker_and_many_agree(written: WrittenBundle) -> None:
    assert verify_bundle(written.prefix, workers=1) == verify_bundle(written.prefix, workers=4)


def test_variant_elements_are_variant_tensor_data(tf_bundles: dict[str, WrittenBundle]) -> None:
    from tensorflow.core.framework import tensor_pb2

    written = tf_bundles["checkpoint_save"]
    bundle = open_bundle(written.prefix)
    variants = [key for key, expected in written.expected.items() if expected.dtype == "variant"]
    assert variants
    for key in variants:
        elements = bundle.decode(key)
        assert len(elements) == bundle.entries[key].numel
        for element in elements:
            assert tensor_pb2.VariantTensorDataProto.FromString(element).type_name


def test_roles_of_a_tf2_checkpoint(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["checkpoint_save"]
    bundle = open_bundle(written.prefix)
    roles = {entry.object_path.split("/")[0]: entry.role for entry in bundle.entries.values() if entry.object_path}
    assert roles == {
        "model": "model_variable",
        "rng": "rng_state",
        "iterator": "data_iterator",
        "save_counter": "save_counter",
    }
    assert bundle.entries[OBJECT_GRAPH_KEY].role == "object_graph"
    inspection = inspect_checkpoint(written.prefix)
    assert inspection.metadata["save_counter"] == written.facts["save_counter"]
    assert inspection.metadata["object_graph"] is True
    assert set(inspection.components) == {"model", "rng", "data_position"}


def test_roles_of_keras_model_and_adam(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["keras_adam"]
    entries = open_bundle(written.prefix).entries.values()
    by_role: dict[str, list] = {}
    for entry in entries:
        by_role.setdefault(entry.role, []).append(entry)
    assert sorted(entry.shape for entry in by_role["model_variable"]) == written.facts["model_shapes"]
    assert len(by_role["optimizer_variable"]) == written.facts["optimizer_variable_count"]
    assert all("/_variables/" in entry.key for entry in by_role["optimizer_variable"])
    assert [entry.key for entry in by_role["learning_rate"]] == ["optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE"]
    assert inspect_checkpoint(written.prefix).metadata["optimizer_iterations"] == written.facts["iterations"]


def test_roles_of_optimizer_slots(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["v1_slots"]
    slots = [entry for entry in open_bundle(written.prefix).entries.values() if entry.role == "optimizer_slot"]
    assert sorted(entry.object_path.rsplit("/", 1)[-1] for entry in slots) == written.facts["slot_names"]
    assert all("/.OPTIMIZER_SLOT/" in entry.key for entry in slots)


def test_tf1_saver_bundle_with_a_partitioned_variable(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["tf1_saver"]
    bundle = open_bundle(written.prefix)
    assert bundle.object_graph is None
    partitioned = bundle.entries[written.facts["partitioned"]]
    assert len(partitioned.slices) == written.facts["partitions"]
    assert partitioned.role == "model_variable"
    assert bundle.entries["global_step"].role == "optimizer_iterations"
    assert {bundle.entries[key].role for key in bundle.entries if key.startswith(partitioned.key + "/Adam")} == {
        "optimizer_slot"
    }


def test_multi_shard_bundle(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["sharded"]
    bundle = open_bundle(written.prefix)
    assert bundle.header.num_shards == len(written.facts["shard_files"]) > 1
    assert [bundle.shard_path(i) for i in range(bundle.header.num_shards)] == written.facts["shard_files"]
    inspection = inspect_checkpoint(written.prefix)
    assert [Path(f.path) for f in inspection.files[1:]] == written.facts["shard_files"]


def test_checkpoint_write_has_no_save_counter(tf_bundles: dict[str, WrittenBundle]) -> None:
    bundle = open_bundle(tf_bundles["checkpoint_write"].prefix)
    assert "save_counter" not in {entry.role for entry in bundle.entries.values()}


def test_checkpoint_manager_directory(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["manager"]
    directory = written.prefix.parent
    assert list_checkpoints(directory) == written.facts["checkpoints"]
    assert latest_checkpoint(directory) == written.prefix
    assert inspect_checkpoint(directory).path == str(written.prefix)


def test_inspection_is_json_with_one_tensor_per_key(written: WrittenBundle) -> None:
    document = inspect_checkpoint(written.prefix).to_json(include_tensors=True)
    json.dumps(document)
    assert document["format"] == "tf-bundle"
    pointers = {tensor["key"] for tensor in document["tensors"]}
    assert pointers == {"/" + key.replace("~", "~0").replace("/", "~1") for key in written.expected}


def test_ckptspec_inspect_reads_a_checkpoint_directory(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["manager"]
    command = [str(Path(sys.executable).parent / "ckptspec"), "inspect", str(written.prefix.parent), "--format", "json"]
    document = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert (document["path"], document["format"]) == (str(written.prefix), "tf-bundle")
    assert document["summary"]["tensor_count"] == len(written.expected)


def test_reading_and_verifying_import_neither_tensorflow_nor_numpy(tf_bundles: dict[str, WrittenBundle]) -> None:
    prefixes = [str(tf_bundles[name].prefix) for name in COMPARED]
    script = (
        "import sys, json\n"
        "from ckptspec.formats.inspect import inspect_checkpoint\n"
        "from ckptspec.formats.tfbundle import open_bundle, verify_bundle\n"
        f"for prefix in {prefixes!r}:\n"
        "    bundle = open_bundle(prefix)\n"
        "    [bundle.decode(key) for key in bundle.entries]\n"
        "    assert verify_bundle(prefix) == [], prefix\n"
        "    json.dumps(inspect_checkpoint(prefix).to_json(include_tensors=True))\n"
        "print(sorted(name for name in ('tensorflow', 'numpy', 'keras') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
