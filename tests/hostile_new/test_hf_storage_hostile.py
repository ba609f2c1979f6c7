"""Hostile shard files of DCP's Hugging Face layout: headers, names and counts an uploader chose."""

from __future__ import annotations

import resource
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptspec._crc32c import crc32c
from ckptspec._exceptions import CorruptCheckpointError
from ckptspec.formats._dcp_metadata import Chunk, SliceLocation, TensorItem
from ckptspec.formats._dcp_tiling import tiling_problems
from ckptspec.formats.hf_storage import open_hf_storage

from ._safetensors import shard_name, sharding, write_shard


def _problems(directory: Path) -> list[tuple[str, str]]:
    opened = open_hf_storage(directory)
    opened.close()
    return [(problem.kind, problem.message) for problem in opened.problems]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ('{"w": {"saved_offsets": [0]}, "w": {"saved_offsets": [4]}}', "names 'w' twice"),
        ('{"w": {"saved_offsets": [NaN]}}', "NaN is not JSON"),
        ('{"w": {"saved_offsets": [Infinity]}}', "Infinity is not JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ('{"w": {"saved_offsets": [-1]}}', "no saved_offsets"),
        ('{"w": {"saved_offsets": [0.5]}}', "no saved_offsets"),
        ('{"w": {"saved_offsets": "0"}}', "no saved_offsets"),
        ('{"w": {"saved_offsets": [0, 0]}}', "no saved_offsets"),
    ],
)
def test_a_malformed_sharding_record_is_a_problem_of_that_file(tmp_path: Path, info: str, expected: str) -> None:
    write_shard(tmp_path / shard_name(1), {"w": 2}, {"DCP_VERSION": "1.0", "DCP_SHARDING_INFO": info})

    ((kind, message),) = _problems(tmp_path)

    assert kind == "metadata-malformed" and "DCP_SHARDING_INFO" in message and expected in message


def test_offsets_far_past_any_real_tensor_are_a_gap_not_an_allocation(tmp_path: Path) -> None:
    write_shard(tmp_path / shard_name(1), {"w": 2}, sharding({"w": [10**30]}))

    ((kind, message),) = _problems(tmp_path)

    assert kind == "tensor-not-tiled" and f"cover 2 of its {10**30 + 2} elements" in message


@pytest.mark.parametrize("name", [shard_name(0), shard_name(1, 0, 1), shard_name(1, 3, 2), "shard-1-model-1-of-1.safetensors"])
def test_a_name_dcp_never_writes_is_reported_not_read_as_a_rank(tmp_path: Path, name: str) -> None:
    write_shard(tmp_path / shard_name(1), {"w": 2}, sharding({"w": [0]}))
    write_shard(tmp_path / name, {"v": 2}, sharding({"v": [0]}))

    opened = open_hf_storage(tmp_path)
    opened.close()

    assert opened.ranks == [0] and list(opened.data_files) == [shard_name(1)]
    assert [(p.kind, p.file.name) for p in opened.problems] == [("unreferenced-shard", name)]


def test_a_rank_number_of_twenty_digits_is_read_as_it_is(tmp_path: Path) -> None:
    name = "shard-99999999999999999999-model-00001-of-00001.safetensors"
    write_shard(tmp_path / name, {"w": 2}, sharding({"w": [0]}))

    opened = open_hf_storage(tmp_path)
    opened.close()

    assert opened.ranks == [99999999999999999998] and not opened.problems


def test_thousands_of_shards_piled_on_one_chunk_are_reported_in_a_few_lines(tmp_path: Path) -> None:
    for rank in range(1, 801):
        write_shard(tmp_path / shard_name(rank), {"w": 2}, sharding({"w": [0]}))

    problems = _problems(tmp_path)

    assert [kind for kind, _ in problems] == ["tensor-not-tiled"] * 3
    assert all("overlap" in message for _, message in problems)


def test_checking_tiling_stops_after_the_reported_problems() -> None:
    """20,000 chunks on one place are 2·10⁸ overlapping pairs; only the first few are looked for."""
    chunks = tuple(Chunk((0,), (2,), SliceLocation(f"f{i}", 0, 8)) for i in range(20_000))
    tensor = TensorItem("w", ("w",), "float32", (2,), chunks)

    problems = tiling_problems(tensor)

    assert problems == ["chunks at [0] and [0] overlap"] * 3


@pytest.fixture
def few_descriptors() -> Iterator[int]:
    """This process may hold only 200 open files (the default limit is 1,024 on many systems)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        yield 200
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_more_shard_files_than_open_file_descriptors_are_read_and_checksummed(tmp_path: Path, few_descriptors: int) -> None:
    ranks = few_descriptors * 2
    for rank in range(1, ranks + 1):
        write_shard(tmp_path / shard_name(rank), {"w": 2}, sharding({"w": [2 * (rank - 1)]}))

    opened = open_hf_storage(tmp_path)
    try:
        (tensor,) = opened.tensors
        assert not opened.problems and tensor.shape == (2 * ranks,) and len(tensor.chunks) == ranks
        assert opened.tensor_crc32c(tensor) == crc32c(bytes(8 * ranks))
    finally:
        opened.close()


def test_a_shard_rewritten_after_its_header_was_read_is_not_checksummed_as_the_old_one(tmp_path: Path) -> None:
    for rank in range(1, 101):  # more than are kept open: the first is read again for its checksum
        write_shard(tmp_path / shard_name(rank), {"w": 2}, sharding({"w": [2 * (rank - 1)]}))
    opened = open_hf_storage(tmp_path)
    write_shard(tmp_path / shard_name(1), {"v": 1, "w": 2}, sharding({"v": [0], "w": [0]}))
    try:
        with pytest.raises(CorruptCheckpointError, match=rf"{shard_name(1)}: w: the file changed while it was read"):
            opened.tensor_crc32c(opened.tensors[0])
    finally:
        opened.close()


def _raw_shard(path: Path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


@pytest.mark.parametrize(
    ("header", "kind", "expected"),
    [
        (b'{"__metadata__": {"DCP_VERSION": "1.0"}, "w": {"dtype": "F32", "shape": [1000000000000], "data_offsets": [0, 4000000000000]}}', "slice-out-of-range", "its header declares 4000000000"),
        (b'{"__metadata__": {"DCP_VERSION": "1.0", "DCP_SHARDING_INFO": "\xff\xfe"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', "slice-corrupt", "not UTF-8"),
        (b'{"__metadata__": {"DCP_VERSION": "1.0", "DCP_SHARDING_INFO": "{\\"w\\": {\\"saved_offsets\\": [' + b"9" * 5000 + b']}}"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', "metadata-malformed", "not valid JSON"),
    ],
)
def test_a_hostile_shard_header_is_a_problem_of_that_shard(tmp_path: Path, header: bytes, kind: str, expected: str) -> None:
    _raw_shard(tmp_path / shard_name(1), header, bytes(4))

    ((found_kind, message),) = _problems(tmp_path)

    assert found_kind == kind and expected in message
