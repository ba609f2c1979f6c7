"""Damaged bundles: every problem names the file and, where one is concerned, the tensor."""

from __future__ import annotations

import importlib.util
import os
import struct
import tracemalloc
from dataclasses import replace
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from .tf_bundle_edit import encode_entry, encode_header, flip_byte, rewrite_index, write_table
from .tf_written import WrittenBundle

from ckptspec._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ckptspec.formats.sstable import SSTable, unmask_crc
from ckptspec.formats.tfbundle import BundleEntry, open_bundle, verify_bundle

pytestmark = pytest.mark.tensorflow


@pytest.fixture
def saved(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> Path:
    return tf_bundles["checkpoint_save"].copy_to(tmp_path / "copy")


def _shard(prefix: Path) -> Path:
    return open_bundle(prefix).shard_path(0)


def _codes(problems: list) -> set[str]:
    return {problem.code for problem in problems}


def _owner(prefix: Path, offset: int) -> str:
    bundle = open_bundle(prefix)
    (owner,) = [e.key for e in bundle.entries.values() if e.offset <= offset < e.offset + e.size]
    return owner


def test_each_tensor_with_a_flipped_first_or_last_byte_is_named(saved: Path) -> None:
    shard = _shard(saved)
    for entry in open_bundle(saved).entries.values():
        if entry.size == 0:
            continue
        for offset in (entry.offset, entry.offset + entry.size - 1):
            flip_byte(shard, offset)
            problems = verify_bundle(saved)
            flip_byte(shard, offset)
            assert {(p.file, p.key) for p in problems} == {(str(shard), entry.key)}, (entry.key, offset)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_a_flipped_byte_anywhere_in_a_shard_names_its_tensor(saved: Path, fraction: float) -> None:
    shard = _shard(saved)
    offset = int(fraction * shard.stat().st_size)
    flip_byte(shard, offset)
    try:
        problems = verify_bundle(saved)
    finally:
        flip_byte(shard, offset)
    assert problems and {p.key for p in problems} == {_owner(saved, offset)}
    assert all(str(p).startswith(f"{shard}: {p.key}: ") for p in problems)


def test_a_flipped_byte_in_a_data_shard_reports_both_checksums(saved: Path) -> None:
    entry = next(e for e in open_bundle(saved).entries.values() if e.dtype.name == "float32" and e.size)
    shard = _shard(saved)
    flip_byte(shard, entry.offset)
    (problem,) = verify_bundle(saved)
    damaged = crc32c.crc32c(shard.read_bytes()[entry.offset : entry.offset + entry.size])
    assert problem.code == "checksum-mismatch"
    assert f"stored crc32c {unmask_crc(entry.crc32c):08x}, computed {damaged:08x}" in problem.message
    assert f"over bytes {entry.offset}..{entry.offset + entry.size}" in problem.message


@pytest.mark.parametrize("block", ["data block", "index block", "metaindex block"])
def test_a_flipped_byte_in_an_index_block_names_the_block(saved: Path, block: str) -> None:
    index = Path(f"{saved}.index")
    table = SSTable.open(index)
    handle = {"data block": None, "index block": table.index_handle, "metaindex block": table.metaindex_handle}[block]
    offset = 0 if handle is None else handle.offset
    flip_byte(index, offset)
    with pytest.raises(
        CorruptCheckpointError, match=rf"^{index}: {block} at offset {offset} \(size \d+\): block checksum mismatch"
    ):
        open_bundle(saved)
    (problem,) = verify_bundle(saved)
    assert (problem.file, problem.key, problem.code) == (str(index), None, "unreadable-index")
    assert f"{block} at offset {offset}" in problem.message


def test_a_damaged_footer_is_not_an_sstable(saved: Path) -> None:
    index = Path(f"{saved}.index")
    flip_byte(index, index.stat().st_size - 1)
    with pytest.raises(CorruptCheckpointError, match=r"not an sstable \(bad magic number"):
        open_bundle(saved)
    index.write_bytes(b"short")
    with pytest.raises(CorruptCheckpointError, match="too short to be an sstable"):
        open_bundle(saved)


def test_a_missing_index_is_a_reader_error(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match=rf"^{tmp_path / 'nothing.index'}: no such file"):
        open_bundle(tmp_path / "nothing")


def test_a_truncated_shard_names_every_tensor_cut_off(saved: Path) -> None:
    shard = _shard(saved)
    new_size = shard.stat().st_size // 2
    os.truncate(shard, new_size)
    entries = open_bundle(saved).entries.values()
    cut = {e.key for e in entries if e.offset + e.size > new_size}
    problems = verify_bundle(saved)
    assert {p.key for p in problems} == cut
    assert _codes(problems) == {"out-of-range"}
    assert all(p.file == str(shard) for p in problems)


def test_a_deleted_shard_is_named_with_what_it_held(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> None:
    prefix = tf_bundles["sharded"].copy_to(tmp_path)
    bundle = open_bundle(prefix)
    missing = bundle.shard_path(1)
    missing.unlink()
    (problem,) = verify_bundle(prefix)
    assert (problem.file, problem.code) == (str(missing), "missing-shard")
    held = sorted(
        [e.key for e in bundle.entries.values() if e.shard_id == 1 and not e.is_sliced]
        + [e.key for e in bundle.slice_entries.values() if e.shard_id == 1]
    )
    assert problem.key in held
    assert f"holds {len(held)} tensors" in problem.message


def test_a_renamed_shard_is_both_missing_and_stray(saved: Path) -> None:
    shard = _shard(saved)
    renamed = shard.with_name(shard.name.replace("-of-00001", "-of-00002"))
    shard.rename(renamed)
    problems = verify_bundle(saved)
    assert {(p.code, p.file) for p in problems} == {
        ("missing-shard", str(shard)),
        ("unexpected-shard", str(renamed)),
        ("shard-count-mismatch", f"{saved}.index"),
    }


def test_a_header_that_lies_about_num_shards(saved: Path) -> None:
    rewrite_index(saved, lambda items: [(b"", encode_header(2)), *items[1:]])
    problems = verify_bundle(saved)
    index = f"{saved}.index"
    assert ("shard-count-mismatch", index) in {(p.code, p.file) for p in problems}
    lie = next(p for p in problems if p.code == "shard-count-mismatch")
    assert "num_shards=2" in lie.message and "-of-00001" in lie.message
    assert {p.file for p in problems if p.code == "missing-shard"} == {
        f"{saved}.data-0000{i}-of-00002" for i in range(2)
    }


def _rewrite_entry(prefix: Path, key: str, **changes: int) -> BundleEntry:
    entry = replace(open_bundle(prefix).entries[key], **changes)
    rewrite_index(prefix, lambda items: [(k, encode_entry(entry) if k == key.encode() else v) for k, v in items])
    return entry


def test_an_entry_pointing_past_the_end_of_its_shard(saved: Path) -> None:
    key = "model/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    shard_size = _shard(saved).stat().st_size
    _rewrite_entry(saved, key, offset=shard_size - 4)
    (problem,) = verify_bundle(saved)
    assert (problem.file, problem.key, problem.code) == (str(_shard(saved)), key, "out-of-range")
    assert f"({shard_size} bytes)" in problem.message


def test_a_pod_size_that_disagrees_with_the_shape(saved: Path) -> None:
    key = "model/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    entry = _rewrite_entry(saved, key, size=open_bundle(saved).entries[key].size - 4)
    (problem,) = verify_bundle(saved)
    assert (problem.key, problem.code) == (key, "size-mismatch")
    assert f"stored size {entry.size} bytes" in problem.message


def test_an_entry_in_a_shard_the_header_does_not_declare(saved: Path) -> None:
    key = "model/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    _rewrite_entry(saved, key, shard_id=3)
    (problem,) = verify_bundle(saved)
    assert (problem.key, problem.code) == (key, "bad-shard-id")


def test_a_missing_slice_and_incomplete_coverage(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> None:
    written = tf_bundles["tf1_saver"]
    prefix = written.copy_to(tmp_path)
    name = written.facts["partitioned"]
    bundle = open_bundle(prefix)
    first, *rest = bundle.entries[name].slices
    slice_key = next(
        k
        for k, piece in bundle.slice_entries.items()
        if piece.shape[0] == first.extents[0].length and k.startswith(b"\0" + name.encode())
    )
    rewrite_index(prefix, lambda items: [(k, v) for k, v in items if k != slice_key])
    problems = verify_bundle(prefix)
    assert [(p.key, p.code) for p in problems] == [
        (f"{name}[{first.spec(bundle.entries[name].shape)}]", "missing-slice")
    ]
    partial = replace(bundle.entries[name], slices=tuple(rest))
    rewrite_index(prefix, lambda items: [(k, encode_entry(partial) if k == name.encode() else v) for k, v in items])
    (problem,) = verify_bundle(prefix)
    assert (problem.key, problem.code) == (name, "slice-coverage")


def test_overlapping_slices(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> None:
    written = tf_bundles["tf1_saver"]
    prefix = written.copy_to(tmp_path)
    name = written.facts["partitioned"]
    entry = open_bundle(prefix).entries[name]
    doubled = replace(entry, slices=entry.slices + entry.slices[:1])
    rewrite_index(prefix, lambda items: [(k, encode_entry(doubled) if k == name.encode() else v) for k, v in items])
    assert [(p.key, p.code) for p in verify_bundle(prefix)] == [(name, "slice-overlap")]


def test_big_endian_bundles_are_recognised(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> None:
    prefix = tf_bundles["tf1_saver"].copy_to(tmp_path)
    little = open_bundle(prefix)
    rewrite_index(prefix, lambda items: [(b"", encode_header(1, endianness=1)), *items[1:]])
    big = open_bundle(prefix)
    assert big.header.endianness == "big"
    raw = big.read_bytes("dense/b")
    assert big.decode("dense/b") == list(struct.unpack(f">{len(raw) // 4}f", raw)) != little.decode("dense/b")
    assert verify_bundle(prefix) == []


def test_a_newer_bundle_version_is_reported(saved: Path) -> None:
    rewrite_index(saved, lambda items: [(b"", encode_header(1, producer=3, min_consumer=2)), *items[1:]])
    assert _codes(verify_bundle(saved)) == {"unsupported-version"}


def test_keys_out_of_order(saved: Path) -> None:
    index = Path(f"{saved}.index")
    items = list(SSTable.open(index).items())
    write_table(index, [items[0], items[2], items[1], *items[3:]])
    with pytest.raises(CorruptCheckpointError, match="does not sort after"):
        open_bundle(saved)


def test_restart_interval_one_reads_the_same(saved: Path) -> None:
    before = open_bundle(saved).entries
    rewrite_index(saved, lambda items: items)
    index = Path(f"{saved}.index")
    write_table(index, list(SSTable.open(index).items()), restart_interval=1)
    assert open_bundle(saved).entries == before


def _has_snappy() -> bool:
    return any(importlib.util.find_spec(name) for name in ("cramjam", "snappy"))


@pytest.mark.skipif(_has_snappy(), reason="a snappy package is installed")
def test_snappy_blocks_need_a_snappy_package(saved: Path) -> None:
    index = Path(f"{saved}.index")
    write_table(index, list(SSTable.open(index).items()), data_compression=1)
    with pytest.raises(UnsupportedFormatError, match=r"data block at offset 0 \(size \d+\): unsupported compression"):
        open_bundle(saved)


def test_verification_memory_stays_flat(tf_bundles: dict[str, WrittenBundle]) -> None:
    written = tf_bundles["large"]
    tracemalloc.start()
    try:
        problems = verify_bundle(written.prefix, workers=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert problems == []
    assert peak < written.facts["nbytes"] / 4
