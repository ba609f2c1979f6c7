"""One pass over a file: digests and range CRC32Cs equal to hashing the bytes directly, across
chunk boundaries, with overlapping and empty ranges, written or read."""

from __future__ import annotations

import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crc32c
import pytest

from ckptspec import _scan
from ckptspec._scan import CHUNK_BYTES, DigestWriter, FileDigests, file_digests, scan


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    data = os.urandom(2 * CHUNK_BYTES + 12345)
    path = tmp_path_factory.mktemp("scan") / "data.bin"
    path.write_bytes(data)
    return path, data


def test_digests_and_ranges_match_direct_hashing(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    ranges = [(0, 10), (CHUNK_BYTES - 7, CHUNK_BYTES + 9), (5, 2 * CHUNK_BYTES + 100), (100, 100), (len(data) - 3, len(data))]
    result = scan(path, algorithms=("crc32c", "sha256"), crc32c_ranges=ranges)
    assert result.size == len(data)
    assert result.digests == FileDigests(crc32c=f"{crc32c.crc32c(data):08x}", sha256=hashlib.sha256(data).hexdigest())
    for start, end in ranges:
        assert result.range_crc32c.get((start, end), 0) == crc32c.crc32c(data[start:end]), (start, end)


def test_ranges_alone_read_only_the_ranges(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    span = (CHUNK_BYTES + 1, CHUNK_BYTES + 4097)
    result = scan(path, crc32c_ranges=[span])
    assert result.digests == FileDigests()
    assert result.range_crc32c[span] == crc32c.crc32c(data[span[0] : span[1]])
    assert file_digests(path, ("sha256",)).sha256 == hashlib.sha256(data).hexdigest()


def test_digest_writer_hashes_what_it_writes(data_file: tuple[Path, bytes]) -> None:
    _, data = data_file
    sink = io.BytesIO()
    with ThreadPoolExecutor(max_workers=1) as pool:
        writer = DigestWriter(sink, ("crc32c", "sha256"), pool)
        for start in range(0, len(data), 3 * 1024 * 1024 + 1):
            writer.write(data[start : start + 3 * 1024 * 1024 + 1])
    assert sink.getvalue() == data and writer.size == len(data)
    assert writer.digests() == FileDigests(crc32c=f"{crc32c.crc32c(data):08x}", sha256=hashlib.sha256(data).hexdigest())


def test_a_file_is_intact_when_every_recorded_digest_is_the_one_read(data_file: tuple[Path, bytes]) -> None:
    path, _ = data_file
    read = scan(path, algorithms=("crc32c", "sha256")).digests
    assert FileDigests(sha256=read.sha256).intact(read)
    assert FileDigests(crc32c=read.crc32c).intact(read)
    assert FileDigests(crc32c=read.crc32c, sha256=read.sha256).intact(read)
    assert not FileDigests(crc32c=read.crc32c, sha256="0" * 64).intact(read)
    assert not FileDigests(sha256=read.sha256).intact(FileDigests(crc32c=read.crc32c))
    assert not FileDigests().intact(read)
    assert not FileDigests(sha256=read.sha256).intact(None)


def test_a_file_read_in_parts_gives_the_digests_of_one_pass(data_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    path, data = data_file
    monkeypatch.setattr(_scan, "_PART_BYTES", CHUNK_BYTES)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert len(_scan._parts(len(data))) == 2  # whole chunks each: the second part starts at a chunk boundary
    boundary = _scan._parts(len(data))[1][0]
    ranges = [(0, 10), (boundary - 7, boundary + 9), (5, len(data) + 100), (boundary, boundary + 1), (len(data) - 3, len(data))]
    result = scan(path, algorithms=("crc32c",), crc32c_ranges=ranges)
    assert result.size == len(data)
    assert result.digests == FileDigests(crc32c=f"{crc32c.crc32c(data):08x}")
    for start, end in ranges:
        assert result.range_crc32c[start, end] == crc32c.crc32c(data[start:end]), (start, end)


@pytest.mark.parametrize("parts", [1, 2])
def test_long_ranges_are_read_through_crc32c_once(
    data_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch, parts: int
) -> None:
    path, data = data_file
    monkeypatch.setattr(_scan, "_PART_BYTES", CHUNK_BYTES)
    monkeypatch.setattr(os, "cpu_count", lambda: parts)
    digested = []

    def counting_crc32c(view: memoryview, value: int = 0) -> int:
        digested.append(len(view))
        return crc32c.crc32c(view, value)

    monkeypatch.setattr(_scan, "crc32c", type("Counting", (), {"crc32c": staticmethod(counting_crc32c)}))
    mib = 1 << 20
    long_ranges = [(3, 3 + 2 * mib), (3 + 2 * mib, CHUNK_BYTES + mib), (CHUNK_BYTES + 2 * mib, len(data) + 50)]
    overlapping = [(mib, 2 * mib + 5), (CHUNK_BYTES, CHUNK_BYTES + 3 * mib), (17, 4000)]
    result = scan(path, algorithms=("crc32c",), crc32c_ranges=[*long_ranges, *overlapping])
    assert result.digests == FileDigests(crc32c=f"{crc32c.crc32c(data):08x}")
    for start, end in [*long_ranges, *overlapping]:
        assert result.range_crc32c[start, end] == crc32c.crc32c(data[start:end]), (start, end)
    # Every byte once for the file and the long disjoint ranges, plus the ranges overlapping them.
    assert sum(digested) == len(data) + sum(len(data[start:end]) for start, end in overlapping)
