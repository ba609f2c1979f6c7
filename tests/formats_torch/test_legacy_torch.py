"""Legacy (pre-1.6) torch.save files written by real torch read like `torch.load(weights_only=True)`."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import crc32c
import pytest
import torch

from ckptspec import CorruptCheckpointError
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.legacy_torch import open_legacy_checkpoint

from .._payloads import SystemCall
from ..torch_reader._torch_compare import assert_same_tree
from ..torch_reader._torch_corpus import tensor_bytes

NAMES = ["dtypes.pt", "views.pt", "lightning.ckpt", "model.pth"]


@pytest.mark.parametrize("name", NAMES)
def test_tree_equals_torch_load(legacy_corpus: dict[str, Path], name: str) -> None:
    path = legacy_corpus[name]
    theirs = torch.load(path, weights_only=True)
    with open_legacy_checkpoint(path) as checkpoint:
        compared = assert_same_tree(checkpoint.tree, theirs)
        assert compared == sum(1 for _ in checkpoint.tensors()) > 0
        assert all(g.safety == "allowed" for g in checkpoint.globals)


@pytest.mark.parametrize("name", NAMES)
def test_byte_ranges_and_crc32c_are_the_tensors_bytes(legacy_corpus: dict[str, Path], name: str) -> None:
    path = legacy_corpus[name]
    data, tree = path.read_bytes(), torch.load(path, weights_only=True)
    with open_legacy_checkpoint(path) as checkpoint:
        for pointer, ref in checkpoint.tensors():
            theirs = checkpoint.resolve(pointer)
            loaded = _at(tree, pointer)
            assert ref.crc32c() == crc32c.crc32c(tensor_bytes(loaded)), pointer
            start, end = ref.byte_range
            if ref.is_contiguous:
                assert data[start:end] == tensor_bytes(loaded), pointer
            assert theirs is ref


def _at(tree: object, pointer: str) -> torch.Tensor:
    node = tree
    for segment in pointer.split("/")[1:]:
        is_index = isinstance(node, (list, tuple)) or (isinstance(node, dict) and segment not in node)
        node = node[int(segment)] if is_index else node[segment]  # type: ignore[index]
    assert isinstance(node, torch.Tensor)
    return node


def test_views_share_one_storage_at_their_offsets(legacy_corpus: dict[str, Path]) -> None:
    with open_legacy_checkpoint(legacy_corpus["views.pt"]) as checkpoint:
        tensors = dict(checkpoint.tensors())
        assert tensors["/row"].storage is tensors["/whole"].storage
        assert (tensors["/row"].storage_offset, tensors["/tail"].storage_offset) == (12, 7)
        assert tensors["/row"].byte_range[0] == tensors["/whole"].byte_range[0] + 12 * 4


def test_detected_and_inspected_as_torch(legacy_corpus: dict[str, Path]) -> None:
    assert detect(legacy_corpus["model.pth"]).kind == "torch-legacy"
    inspection = inspect_checkpoint(legacy_corpus["lightning.ckpt"])
    assert inspection.format == "lightning"
    assert inspection.metadata["serialization"] == "legacy"
    assert inspection.components["model"] == "/state_dict"
    model = torch.load(legacy_corpus["lightning.ckpt"], weights_only=True)["state_dict"]
    assert [t.key for t in inspection.tensors if t.component == "model"] == [f"/state_dict/{k}" for k in model]


def _pickles(*values: object) -> bytes:
    return b"".join(pickle.dumps(value, protocol=2) for value in values)


_MAGIC = 0x1950A86A20F9469CFC6C
_SYS_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 8}}


@pytest.mark.parametrize("hidden_in", [1, 2])
def test_a_global_in_a_header_pickle_is_refused_and_named(tmp_path: Path, legacy_corpus: dict[str, Path], hidden_in: int) -> None:
    original = legacy_corpus["model.pth"].read_bytes()
    header = _pickles(_MAGIC, 1001, _SYS_INFO)
    values: list[object] = [_MAGIC, 1001, _SYS_INFO]
    marker = tmp_path / "ran"
    values[hidden_in] = SystemCall(f"touch {marker}")
    path = tmp_path / "hostile.pth"
    path.write_bytes(_pickles(*values) + original[len(header) :])
    with pytest.raises(CorruptCheckpointError, match=r"hostile\.pth: pickle .* names globals.*posix\.system \(dangerous\)|nt\.system"):
        open_legacy_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[:-3], "past the end of the file"),
        (lambda data: data + b"PK\x03\x04 appended", "bytes after the last storage"),
        (lambda data: data[:20], "has no STOP|truncated"),
        (lambda data: data.replace(struct.pack("<q", 16 * 8), struct.pack("<q", 1 << 60), 1), "past the end of the file"),
    ],
    ids=["truncated-storage", "trailing-bytes", "truncated-pickle", "huge-count"],
)
def test_damage_is_a_clear_error_naming_the_file(tmp_path: Path, legacy_corpus: dict[str, Path], damage, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "damaged.pth"
    path.write_bytes(damage(legacy_corpus["model.pth"].read_bytes()))
    with pytest.raises(CorruptCheckpointError, match=f"damaged\\.pth: .*({message})"):
        open_legacy_checkpoint(path)


def test_a_payload_in_the_object_pickle_is_reported_dangerous(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "payload.pth"
    torch.save({"w": torch.ones(3), "x": SystemCall(f"touch {marker}")}, path, _use_new_zipfile_serialization=False)
    with open_legacy_checkpoint(path) as checkpoint:
        assert [g.qualname for g in checkpoint.globals if g.safety == "dangerous"] in (["posix.system"], ["nt.system"])
        assert [p for p, _ in checkpoint.tensors()] == ["/w"]
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(CorruptCheckpointError, match="truncated.pth: .*names dangerous globals: (posix|nt).system"):
        open_legacy_checkpoint(truncated)
    assert not marker.exists()
