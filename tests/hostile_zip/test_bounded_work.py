"""Claims read from the file cost nothing until checked against the bytes present: a directory counting
10**9 entries, tensors claiming 10**12 elements or broadcasting one element forever."""

from __future__ import annotations

import io
import json
import pickle
import struct
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ckptspec import CorruptCheckpointError
from ckptspec.cli import cli
from ckptspec.formats.torchzip import inspect_torch_checkpoint, open_torch_checkpoint
from ckptspec.formats._tensors import extent_problems

from ._layouts import Member, plain, read_members

torch = pytest.importorskip("torch")

TRILLION = 10**12


def _saved_members(value: object) -> list[Member]:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return read_members(buffer)


class _Storage:
    """Stands for storage `0` of the archive (one float32) in a hand-written pickle."""


class _Tensor:
    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.shape, self.stride = shape, stride

    def __reduce__(self) -> tuple[Any, ...]:
        return torch._utils._rebuild_tensor_v2, (_Storage(), 0, self.shape, self.stride, False, OrderedDict())


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj: object) -> object:
        return ("storage", torch.FloatStorage, "0", "cpu", 1) if isinstance(obj, _Storage) else None


def _with_tensor(tmp_path: Path, shape: tuple[int, ...], stride: tuple[int, ...]) -> Path:
    """A real one-float archive whose pickle claims a tensor of `shape` and `stride` on that float."""
    members = _saved_members({"w": torch.ones(1)})
    buffer = io.BytesIO()
    _TorchPickler(buffer, protocol=2).dump({"w": _Tensor(shape, stride)})
    root = members[0].name.partition(b"/")[0]
    members = [Member(m.name, buffer.getvalue()) if m.name == root + b"/data.pkl" else m for m in members]
    path = tmp_path / "claims.pt"
    path.write_bytes(plain(members))
    return path


def _quickly(action: Any) -> Any:
    started = time.process_time()
    result = action()
    assert time.process_time() - started < 2.0
    return result


def test_a_broadcast_of_a_trillion_elements_is_summarised_without_reading(tmp_path: Path) -> None:
    path = _with_tensor(tmp_path, (TRILLION,), (0,))
    inspection = _quickly(lambda: inspect_torch_checkpoint(path))
    (tensor,) = inspection.tensors
    assert (tensor.key, tensor.shape, tensor.nbytes) == ("/w", (TRILLION,), 4 * TRILLION)


def test_a_trillion_element_claim_on_one_float_is_named_by_its_tensor(tmp_path: Path) -> None:
    path = _with_tensor(tmp_path, (TRILLION, 2), (2, 1))
    with open_torch_checkpoint(path) as checkpoint:
        (problem,) = _quickly(lambda: extent_problems(checkpoint.path, checkpoint.tensors()))
        assert (problem.pointer, problem.message) == ("/w", "the tensor needs bytes up to 8000000000000 of storage 0, which has 4")
        with pytest.raises(CorruptCheckpointError, match="claims.pt: the tensor needs bytes up to 8000000000000"):
            checkpoint.resolve("/w").crc32c()
    result = CliRunner().invoke(cli, ["validate", str(path), "--format", "json"])
    assert result.exit_code == 1
    findings = [finding for checked in json.loads(result.stdout)["results"] for finding in checked["findings"]]
    assert [(f["code"], f["pointer"]) for f in findings if f["code"] == "CKS211"] == [("CKS211", "/w")], findings


def _claiming_entries(archive: bytes, entries: int) -> bytes:
    """The archive with its Zip64 end record counting `entries` (and the classic one deferring to it)."""
    data = bytearray(archive)
    zip64 = data.rindex(b"PK\x06\x06")
    struct.pack_into("<2Q", data, zip64 + 24, entries, entries)
    end = data.rindex(b"PK\x05\x06")
    struct.pack_into("<2H", data, end + 8, 0xFFFF, 0xFFFF)
    return bytes(data)


def test_a_directory_claiming_a_billion_entries_is_refused_at_once(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    path = tmp_path / "billion.pt"
    path.write_bytes(_claiming_entries(buffer.getvalue(), 10**9))
    assert path.stat().st_size < 4096
    with pytest.raises(CorruptCheckpointError, match=r"billion.pt: bad zip directory: it claims 1000000000 entries"):
        _quickly(lambda: open_torch_checkpoint(path))
