"""The CRC-32 a torch.save archive's zip directory records for each record, verified without torch:
`TorchCheckpoint.verify` against files real torch and Lightning wrote, then damaged byte by byte."""

from __future__ import annotations

import shutil
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ckptspec import CorruptCheckpointError
from ckptspec.formats.torchzip import TorchCheckpoint, open_torch_checkpoint
from ckptspec.formats._tensors import RecordProblem

torch = pytest.importorskip("torch")

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_DATA_DESCRIPTOR_FLAG = 0x08
_CENTRAL_HEADER_SIZE = 46
_CENTRAL_CRC = slice(16, 20)


def _data_range(path: Path, name: str) -> tuple[int, int]:
    """`[start, end)` of a record's bytes, found with `zipfile` and the local header alone."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    with path.open("rb") as handle:
        handle.seek(info.header_offset)
        *_, name_length, extra_length = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    return start, start + info.file_size


def _stored_crc(path: Path, name: str) -> int:
    with zipfile.ZipFile(path) as archive:
        return archive.getinfo(name).CRC


def _flip(path: Path, offset: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _flip_inside(path: Path, name: str, needle: bytes, at: int, last: bool = False) -> None:
    """Flip the lowest bit of byte `at` of `needle`, found inside record `name` (its last occurrence if `last`)."""
    start, end = _data_range(path, name)
    data = path.read_bytes()
    found = data.rfind(needle, start, end) if last else data.find(needle, start, end)
    assert found >= 0, f"{needle!r} not in {name}"
    _flip(path, found + at)


def _crc_of(path: Path, name: str) -> int:
    start, end = _data_range(path, name)
    return zlib.crc32(path.read_bytes()[start:end])


def _mismatch(path: Path, name: str, stored: int, pointers: tuple[str, ...] = ()) -> RecordProblem:
    return RecordProblem(path, name, _data_range(path, name), stored, _crc_of(path, name), pointers)


@contextmanager
def _saving_without_crc32() -> Iterator[None]:
    from torch.utils.serialization import config

    previous = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = previous


def test_every_file_torch_and_lightning_wrote_verifies(plain_corpus: dict[str, Path], lightning_corpus: dict[str, Path]) -> None:
    for path in [*plain_corpus.values(), *lightning_corpus.values()]:
        with open_torch_checkpoint(path) as checkpoint:
            assert checkpoint.verify() == [], path


def test_torch_records_the_crc_in_the_central_directory_not_the_local_header(plain_corpus: dict[str, Path]) -> None:
    # torch 2.13 writes every local header with the data descriptor flag and CRC 0: the central
    # directory, which the reader uses, holds the real value.
    path = plain_corpus["training.pt"]
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    for info in infos:
        _magic, _version, flags, _method, _time, _date, local_crc, *_ = _LOCAL_HEADER.unpack_from(data, info.header_offset)
        assert (flags & _DATA_DESCRIPTOR_FLAG, local_crc) == (_DATA_DESCRIPTOR_FLAG, 0), info.filename
        assert info.CRC == _crc_of(path, info.filename), info.filename


def test_a_flipped_float_in_lightning_hyper_parameters_still_loads_but_fails_its_crc(
    lightning_corpus: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "last.ckpt"
    shutil.copy(lightning_corpus["last.ckpt"], path)
    stored = _stored_crc(path, "archive/data.pkl")
    _flip_inside(path, "archive/data.pkl", b"G" + struct.pack(">d", 0.05), at=8, last=True)
    assert torch.load(path, weights_only=False)["hyper_parameters"]["lr"] != 0.05  # torch never checks the CRC
    with open_torch_checkpoint(path) as checkpoint:
        problems = checkpoint.verify(trusted=_every_tensor(checkpoint))
        assert problems == checkpoint.verify() == [_mismatch(path, "archive/data.pkl", stored)]
    start, end = _data_range(path, "archive/data.pkl")
    assert str(problems[0]) == (
        f"{path}: record archive/data.pkl: checksum mismatch: stored crc32 {stored:08x}, "
        f"computed {_crc_of(path, 'archive/data.pkl'):08x} over bytes {start}..{end}"
    )


def test_a_flipped_string_in_a_plain_torch_pickle_fails_its_crc(plain_corpus: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "user_objects.pt"
    shutil.copy(plain_corpus["user_objects.pt"], path)
    stored = _stored_crc(path, "user_objects/data.pkl")
    _flip_inside(path, "user_objects/data.pkl", b"deep", at=3)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.resolve("/config/state/name") == "deeq"
        assert checkpoint.verify(trusted=_every_tensor(checkpoint)) == [_mismatch(path, "user_objects/data.pkl", stored)]


def test_a_flipped_tensor_byte_is_left_to_whoever_trusts_its_tensors(plain_corpus: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "views.pt"
    shutil.copy(plain_corpus["views.pt"], path)
    (record,) = (name for name in zipfile.ZipFile(path).namelist() if name.startswith("views/data/"))
    stored = _stored_crc(path, record)
    _flip(path, _data_range(path, record)[0] + 40)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.verify(trusted=_every_tensor(checkpoint)) == []
        (problem,) = checkpoint.verify()
    pointers = ("/base", "/row", "/transposed", "/every_other", "/column", "/broadcast", "/block")
    assert problem == _mismatch(path, record, stored, pointers)
    assert problem.message.endswith("; it holds tensors /base, /row, /transposed and 4 more")


def test_a_record_larger_than_a_chunk_is_verified_to_its_last_byte(tmp_path: Path) -> None:
    path = tmp_path / "large.pt"
    torch.save({"big": torch.arange(9 << 20, dtype=torch.float32), "small": torch.ones(2)}, path)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.verify() == []
        record = f"large/data/{checkpoint.resolve('/big').storage.key}"
    stored = _stored_crc(path, record)
    _flip(path, _data_range(path, record)[1] - 1, mask=0x80)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.verify() == [_mismatch(path, record, stored, ("/big",))]


def test_a_zeroed_crc_is_a_mismatch_when_the_archive_records_crcs(plain_corpus: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "state_dict.pt"
    shutil.copy(plain_corpus["state_dict.pt"], path)
    name = "state_dict/byteorder"
    stored = _stored_crc(path, name)
    data = bytearray(path.read_bytes())
    entry = data.index(name.encode(), data.index(b"PK\x01\x02")) - _CENTRAL_HEADER_SIZE
    crc_field = slice(entry + _CENTRAL_CRC.start, entry + _CENTRAL_CRC.stop)
    assert data[crc_field] == struct.pack("<I", stored)
    data[crc_field] = bytes(4)
    path.write_bytes(bytes(data))
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.verify(trusted=_every_tensor(checkpoint)) == [_mismatch(path, name, 0)]


def test_an_archive_saved_without_crcs_has_nothing_to_verify(tmp_path: Path) -> None:
    path = tmp_path / "unchecked.pt"
    with _saving_without_crc32():
        torch.save({"w": torch.ones(4), "note": "no crc"}, path)
    assert {info.CRC for info in zipfile.ZipFile(path).infolist()} == {0}
    _flip_inside(path, "unchecked/data.pkl", b"no crc", at=0)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.resolve("/note") == "oo crc"
        assert checkpoint.verify() == []


def test_a_pickle_that_no_longer_reads_says_its_bytes_were_damaged(plain_corpus: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "state_dict.pt"
    shutil.copy(plain_corpus["state_dict.pt"], path)
    stored = _stored_crc(path, "state_dict/data.pkl")
    _flip(path, _data_range(path, "state_dict/data.pkl")[1] - 1)  # the STOP opcode
    with pytest.raises(CorruptCheckpointError) as caught:
        open_torch_checkpoint(path)
    assert str(caught.value).startswith(f"{path}: data.pkl cannot be read: ")
    assert str(caught.value).endswith(
        f" (its CRC-32 is {_crc_of(path, 'state_dict/data.pkl'):08x}, not the {stored:08x} the zip directory records: "
        "the bytes were damaged)"
    )


def _every_tensor(checkpoint: TorchCheckpoint) -> list[str]:
    return [pointer for pointer, _ in checkpoint.tensors()]
