"""safetensors files written by the real library read as `safe_open` reads them; bad headers are
refused as the library refuses them, with the file and the tensor named."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import crc32c
import pytest
import torch
from safetensors import safe_open

from ckptspec import CorruptCheckpointError, ReaderError
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.safetensors import open_safetensors

from ..torch_reader._torch_corpus import tensor_bytes


@pytest.mark.parametrize("name", ["model.safetensors", "index"])
def test_inventory_equals_safe_open(safetensors_corpus: dict[str, Path], name: str) -> None:
    path = safetensors_corpus[name]
    with open_safetensors(path) as checkpoint:
        ours = dict(checkpoint.tensors())
        shards = checkpoint.files[1:] or checkpoint.files
        theirs: dict[str, torch.Tensor] = {}
        for shard in shards:
            with safe_open(shard, "pt") as handle:
                theirs.update({key: handle.get_tensor(key) for key in handle.keys()})
        assert sorted(ours) == sorted(f"/{key}" for key in theirs)
        for key, tensor in theirs.items():
            ref = ours[f"/{key}"]
            assert (ref.dtype, ref.shape) == (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)), key
            assert ref.read_bytes() == tensor_bytes(tensor), key
            assert ref.crc32c() == crc32c.crc32c(tensor_bytes(tensor)), key
            start, end = ref.byte_range
            assert ref.storage.archive.path.read_bytes()[start:end] == tensor_bytes(tensor), key


def test_metadata_and_detection(safetensors_corpus: dict[str, Path]) -> None:
    single, index = safetensors_corpus["model.safetensors"], safetensors_corpus["index"]
    renamed = single.with_name("weights.bin")
    renamed.write_bytes(single.read_bytes())
    assert detect(renamed).kind == detect(index).kind == "safetensors"
    inspection = inspect_checkpoint(single)
    assert inspection.metadata == {"format": "pt", "step": "7"}
    sharded = inspect_checkpoint(index)
    assert [Path(f.path).name for f in sharded.files] == [
        "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    ]  # fmt: skip
    assert sum(t.nbytes for t in sharded.tensors) == json.loads(index.read_text())["metadata"]["total_size"]


def _write(path: Path, header: object, data: bytes = b"", *, length: int | None = None) -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


_F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD_HEADERS = {
    "huge-header": (b"{}", b"", 100_000_001, "exceeds the 100000000-byte limit"),
    "length-past-end": (b"{}", b"", 4096, "runs past the end"),
    "not-utf8": (b'{"\xff": 1}', b"", None, "not UTF-8"),
    "not-json": (b'{"a": ', b"", None, "not valid JSON"),
    "not-an-object-start": (b'["a"]', b"", None, "does not start with"),
    "overlap": ({"a": _F32x2, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), None, "tensor b: .*overlaps"),
    "gap": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), None, "tensor a: .*gap of 4 bytes"),
    "past-end": ({"a": _F32x2}, bytes(4), None, "cover 8 bytes .* holds 4 .* truncated"),
    "trailing-data": ({"a": _F32x2}, bytes(12), None, "cover 8 bytes .* holds 12"),
    "wrong-size": ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), None, "tensor a: .*span 8 bytes, not what"),
    "huge-shape": ({"a": {"dtype": "U8", "shape": [10**300] * 50, "data_offsets": [0, 8]}}, bytes(8), None, "tensor a: .*span 8 bytes"),
    "unknown-dtype": ({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16), None, "tensor a: unknown dtype"),
    "negative-shape": ({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b"", None, "tensor a: shape"),
    "reversed-offsets": ({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, bytes(4), None, "tensor a: data_offsets"),
    "metadata-not-strings": ({"__metadata__": {"step": 7}}, b"", None, "__metadata__ must map strings to strings"),
}


@pytest.mark.parametrize("case", list(BAD_HEADERS))
def test_bad_header_is_refused_like_the_library(tmp_path: Path, case: str) -> None:
    header, data, length, message = BAD_HEADERS[case]
    path = _write(tmp_path / "bad.safetensors", header, data, length=length)
    with pytest.raises(CorruptCheckpointError, match=rf"bad\.safetensors: .*{message}"):
        open_safetensors(path)
    with pytest.raises(Exception):  # noqa: B017 - the library's own error types differ by version
        with safe_open(path, "pt") as handle:
            [handle.get_tensor(key) for key in handle.keys()]


def test_a_name_given_twice_is_refused(tmp_path: Path) -> None:
    text = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}'
    with pytest.raises(CorruptCheckpointError, match="names 'a' twice"):
        open_safetensors(_write(tmp_path / "twice.safetensors", text, b"xy"))


def _sharded_copy(safetensors_corpus: dict[str, Path], tmp_path: Path) -> tuple[Path, dict[str, object]]:
    source = safetensors_corpus["index"].parent
    for file in source.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    index = tmp_path / "model.safetensors.index.json"
    return index, json.loads(index.read_text())


def test_index_naming_a_missing_shard(safetensors_corpus: dict[str, Path], tmp_path: Path) -> None:
    index, _ = _sharded_copy(safetensors_corpus, tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CorruptCheckpointError, match="index.json: shard model-00002-of-00002.safetensors is missing"):
        open_safetensors(index)


@pytest.mark.parametrize("change", ["move", "drop", "escape", "phantom"])
def test_each_tensor_in_exactly_one_shard(safetensors_corpus: dict[str, Path], tmp_path: Path, change: str) -> None:
    index, document = _sharded_copy(safetensors_corpus, tmp_path)
    weight_map: dict[str, str] = document["weight_map"]  # type: ignore[assignment]
    first = next(iter(weight_map))
    if change == "move":
        weight_map[first] = "model-00002-of-00002.safetensors"
    elif change == "drop":
        del weight_map[first]
    elif change == "escape":
        weight_map[first] = "../model-00001-of-00002.safetensors"
    else:
        weight_map["phantom.weight"] = "model-00001-of-00002.safetensors"
    index.write_text(json.dumps(document))
    with pytest.raises(ReaderError, match=f"{first}|phantom.weight|not a file name beside the index"):
        open_safetensors(index)
