"""Files written by Keras' own callbacks read without Keras: inventories equal Keras' and h5py's own reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import crc32c
import pytest
from click.testing import CliRunner

from ckptspec.cli import cli
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.keras import open_keras

from .keras_written import KerasRun

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")


def _keras_inventory(model: Any) -> dict[str, Any]:
    """Keras 3's own layout, named by Keras' own naming functions: `layers/<snake-case class>[_<n>]/vars/<i>`
    per layer (trainable variables first), `optimizer/vars/<i>`; values as the loaded model holds them."""
    from keras.src.saving.saving_lib import _get_unique_name
    from keras.src.utils.naming import to_snake_case

    used: dict[str, int] = {}
    inventory = {}
    for layer in model.layers:
        name = _get_unique_name(to_snake_case(type(layer).__name__), used)
        variables = layer._trainable_variables + layer._non_trainable_variables
        inventory.update({f"layers/{name}/vars/{i}": v.numpy() for i, v in enumerate(variables)})
    inventory.update({f"optimizer/vars/{i}": v.numpy() for i, v in enumerate(model.optimizer.variables)})
    return inventory


def _h5py_inventory(handle: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found[name] = obj[()]

    handle.visititems(visit)
    return found


def _assert_same(path: Path, expected: dict[str, Any]) -> None:
    with open_keras(path) as keras_file:
        assert sorted(keras_file.tensors) == sorted(expected)
        for key, value in expected.items():
            tensor = keras_file.tensors[key]
            assert tensor.dataset.dtype == str(value.dtype), key
            assert tensor.dataset.shape == value.shape, key
            assert keras_file.crc32c(tensor) == crc32c.crc32c(np.ascontiguousarray(value).tobytes()), key


def test_keras_archives_list_what_load_model_loads(keras_run: KerasRun) -> None:
    keras = pytest.importorskip("keras")
    assert keras_run.best
    for path in keras_run.best:
        assert detect(path).kind == "keras"
        _assert_same(path, _keras_inventory(keras.models.load_model(path)))


def test_weights_files_list_what_load_weights_loads(keras_run: KerasRun) -> None:
    keras = pytest.importorskip("keras")
    from .keras_written import build_model

    for path in [*keras_run.weights_only, keras_run.backup]:
        model = build_model(keras)
        model.optimizer.build(model.trainable_variables)
        model.load_weights(path)
        _assert_same(path, _keras_inventory(model))


def test_every_file_equals_a_full_h5py_read(keras_run: KerasRun) -> None:
    for path in [*keras_run.weights_only, keras_run.backup, *sorted(keras_run.plain.rglob("*.weights.h5"))]:
        with h5py.File(path, "r") as handle:
            _assert_same(path, _h5py_inventory(handle))


def test_byte_ranges_point_at_the_values_in_the_archive(keras_run: KerasRun) -> None:
    path = keras_run.best[-1]
    raw = path.read_bytes()
    with open_keras(path) as keras_file:
        for tensor in keras_file.tensors.values():
            ((start, size),) = keras_file.byte_ranges(tensor)
            assert crc32c.crc32c(raw[start : start + size]) == keras_file.crc32c(tensor)


def test_layer_config_and_metadata_come_from_the_archive(keras_run: KerasRun) -> None:
    keras = pytest.importorskip("keras")
    inspection = inspect_checkpoint(keras_run.best[-1])
    assert inspection.format == "keras"
    assert inspection.metadata["keras_version"] == keras.__version__
    with open_keras(keras_run.best[-1]) as keras_file:
        layers = {layer.path: layer for layer in keras_file.layers or []}
    assert layers["layers.1"].type == "keras.layers.BatchNormalization"
    assert layers["layers.1"].constants["epsilon"] == 1e-3
    assert layers["layers.1"].constants["momentum"] == 0.9
    assert layers["layers.0"].constants["activation"] == "relu"
    assert {ref.safety for ref in inspection.globals} == {"allowed"}


def test_chunked_compressed_datasets_checksum_their_stored_chunks(tmp_path: Path) -> None:
    path = tmp_path / "chunked.weights.h5"
    values = np.arange(4096, dtype=np.float32).reshape(64, 64)
    with h5py.File(path, "w") as handle:
        handle.create_dataset("layers/dense/vars/0", data=values, chunks=(16, 64), compression="gzip")
        handle.create_dataset("layers/dense/vars/1", data=np.arange(3, dtype=np.int16), chunks=(2,))
    with h5py.File(path, "r") as handle:
        expected = {}
        for name in ("layers/dense/vars/0", "layers/dense/vars/1"):
            dataset = handle[name]
            value = 0
            for index in range(dataset.id.get_num_chunks()):
                offset = dataset.id.get_chunk_info(index).chunk_offset
                value = crc32c.crc32c(dataset.id.read_direct_chunk(offset)[1], value)
            expected[name] = value
    with open_keras(path) as keras_file:
        for name, value in expected.items():
            tensor = keras_file.tensors[name]
            assert tensor.dataset.layout == "chunked"
            assert keras_file.crc32c(tensor) == value
        assert keras_file.tensors["layers/dense/vars/0"].dataset.shape == (64, 64)


def test_inspect_json_lists_every_tensor(keras_run: KerasRun) -> None:
    result = CliRunner().invoke(cli, ["inspect", "--format", "json", "--tensors", str(keras_run.backup)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["format"] == "keras"
    with h5py.File(keras_run.backup, "r") as handle:
        names = sorted(_h5py_inventory(handle))
    assert sorted(tensor["key"][1:].replace("~1", "/") for tensor in document["tensors"]) == names
    components = {component["name"]: component["tensor_count"] for component in document["components"]}
    assert components["optimizer"] == sum(name.startswith("optimizer/") for name in names)


def test_keras_2_hdf5_files_read_like_h5py_reads_them(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    from .keras_written import build_model, data

    model = build_model(keras)
    model.fit(*data(np), epochs=1, verbose=0)
    path = tmp_path / "legacy.h5"
    model.save(path)  # Keras' legacy HDF5 format: model_weights/..., optimizer_weights/...
    with h5py.File(path, "r") as handle:
        expected = _h5py_inventory(handle)
    _assert_same(path, expected)
    components = {tensor.component for tensor in inspect_checkpoint(path).tensors}
    assert components == {"model", "optimizer"}
