"""ckptspec's zip reader against torch's own (`torch._C.PyTorchFileReader`, miniz): on every archive of
the corpus, every hostile layout and a fuzzed set, both list the same records with the same bytes, or
ckptspec refuses the archive. Never "ckptspec reads X where torch reads Y"."""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError
from ckptspec.formats._zip_records import ZipArchive

from ..hostile_zip._layouts import LAYOUTS, READ_AS_TORCH_READS, Sources, read_members

torch = pytest.importorskip("torch")

Records = dict[str, bytes]


def torch_records(path: Path) -> Records | str:
    """What torch's reader finds, or why it refuses the archive."""
    try:
        reader = torch._C.PyTorchFileReader(str(path))
        return {name: reader.get_record(name) for name in reader.get_all_records()}
    except (RuntimeError, UnicodeDecodeError) as exc:  # a name that is not UTF-8 fails in the binding
        return f"refused: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def ckptspec_records(path: Path) -> Records | None:
    """What ckptspec's reader finds; None when it refuses the archive."""
    try:
        archive = ZipArchive(path)
    except CkptspecError:
        return None
    try:
        archive.require_stored()
        return {record.name: archive.read(record.offset, record.size) for record in archive.records.values()}
    except CkptspecError:
        return None
    finally:
        archive.close()


def _supported_version(records: Records) -> bool:
    """Whether torch's reader accepts the archive's `version` record, which it also checks (`stoull`,
    then 1 to 10 in torch 2.13): a refusal for that reason is no part of the zip layout."""
    value = records.get("version", records.get(".data/version", b""))
    digits = re.match(rb"\s*\+?(\d+)", value)
    return digits is not None and 1 <= int(digits.group(1)) <= 10


def assert_same_or_refused(path: Path) -> None:
    ours, theirs = ckptspec_records(path), torch_records(path)
    if ours is None:
        return
    if isinstance(theirs, str):
        assert not _supported_version(ours), f"{path.name}: ckptspec reads {sorted(ours)}, torch {theirs}"
        return
    assert list(ours) == list(theirs), f"{path.name}: record names differ"
    for name, data in ours.items():
        assert data == theirs[name], f"{path.name}: record {name} differs"


def test_every_corpus_archive_reads_as_torch_reads_it(
    plain_corpus: dict[str, Path], lightning_corpus: dict[str, Path]
) -> None:
    for path in [*plain_corpus.values(), *lightning_corpus.values()]:
        assert ckptspec_records(path) is not None, f"{path.name}: refused"
        assert ckptspec_records(path) == torch_records(path), path.name


def _saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def sources() -> Sources:
    weights = torch.arange(8, dtype=torch.float32)
    benign, other = _saved({"w": weights, "note": "benign"}), _saved({"w": weights, "note": "other pickle"})
    return Sources(read_members(io.BytesIO(benign)), read_members(io.BytesIO(other)))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_hostile_layout_is_refused(layout: str, sources: Sources, tmp_path: Path) -> None:
    path = tmp_path / f"{layout}.pt"
    path.write_bytes(LAYOUTS[layout](sources))
    assert ckptspec_records(path) is None, f"{layout}: torch finds {sorted(torch_records(path))}"


@pytest.mark.parametrize("layout", sorted(READ_AS_TORCH_READS))
def test_every_unusual_layout_reads_as_torch_reads_it(layout: str, sources: Sources, tmp_path: Path) -> None:
    path = tmp_path / f"{layout}.pt"
    path.write_bytes(READ_AS_TORCH_READS[layout](sources))
    assert ckptspec_records(path) is not None
    assert_same_or_refused(path)


# --- fuzzing ---------------------------------------------------------------------------------------


def _flip(data: bytearray, draw: st.DrawFn) -> None:
    for _ in range(draw(st.integers(1, 4))):
        # Structure is mostly at the end: half the flips land in the last 2 KiB.
        tail = draw(st.booleans())
        low = max(0, len(data) - 2048) if tail else 0
        data[draw(st.integers(low, len(data) - 1))] = draw(st.integers(0, 255))


def _central_entries(data: bytearray) -> list[int]:
    end = data.rindex(b"PK\x05\x06")
    size, offset = struct.unpack_from("<2L", data, end + 12)
    entries, at = [], offset
    while at < offset + size and data[at : at + 4] == b"PK\x01\x02":
        entries.append(at)
        name, extra, comment = struct.unpack_from("<3H", data, at + 28)
        at += 46 + name + extra + comment
    return entries


def _duplicate_entry(data: bytearray, draw: st.DrawFn) -> None:
    """Repeat one central-directory entry and count it in every end record."""
    entries = _central_entries(data)
    index = draw(st.integers(0, len(entries) - 1))
    bounds = [*entries, entries[-1] + 46 + sum(struct.unpack_from("<3H", data, entries[-1] + 28))]
    copy = bytes(data[bounds[index] : bounds[index + 1]])
    end_of_directory = bounds[-1]
    data[end_of_directory:end_of_directory] = copy
    for signature, count_at, size_at, count_format in ((b"PK\x06\x06", 24, 40, "<Q"), (b"PK\x05\x06", 8, 12, "<H")):
        at = data.rfind(signature)
        if at >= 0:
            for field in (count_at, count_at + (8 if count_format == "<Q" else 2)):
                struct.pack_into(count_format, data, at + field, struct.unpack_from(count_format, data, at + field)[0] + 1)
            size_format = "<Q" if count_format == "<Q" else "<L"
            struct.pack_into(size_format, data, at + size_at, struct.unpack_from(size_format, data, at + size_at)[0] + len(copy))
    locator = data.rfind(b"PK\x06\x07")
    if locator >= 0:
        struct.pack_into("<Q", data, locator + 8, struct.unpack_from("<Q", data, locator + 8)[0] + len(copy))


def _shift_offset(data: bytearray, draw: st.DrawFn) -> None:
    """Move the directory offset of an end record, or one entry's local-header offset."""
    delta = draw(st.sampled_from([-64, -30, -16, -1, 1, 16, 30, 64]))
    choice = draw(st.sampled_from(["end", "zip64-end", "entry"]))
    if choice == "entry":
        entry = draw(st.sampled_from(_central_entries(data)))
        field, size = entry + 42, "<L"
    elif choice == "zip64-end" and data.rfind(b"PK\x06\x06") >= 0:
        field, size = data.rfind(b"PK\x06\x06") + 48, "<Q"
    else:
        field, size = data.rindex(b"PK\x05\x06") + 16, "<L"
    struct.pack_into(size, data, field, max(0, struct.unpack_from(size, data, field)[0] + delta))


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    mutation = draw(st.sampled_from(["flip", "duplicate", "append", "prepend", "shift"]))
    if mutation == "flip":
        _flip(data, draw)
    elif mutation == "duplicate":
        _duplicate_entry(data, draw)
    elif mutation == "append":
        data += draw(st.sampled_from([b"\x00" * 22, b"PK\x05\x06" + bytes(18), bytes(original[:64])]))
    elif mutation == "prepend":
        data[0:0] = draw(st.sampled_from([b"PK\x03\x04" + bytes(26), bytes(original[:30])]))
    else:
        _shift_offset(data, draw)
    return bytes(data)


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _saved({"w": torch.arange(6, dtype=torch.float32), "b": torch.ones(2, dtype=torch.int64), "note": "x"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_archives_read_as_torch_reads_them_or_are_refused(
    small_archive: bytes, lightning_corpus: dict[str, Path], tmp_path: Path, data: st.DataObject
) -> None:
    original = data.draw(st.sampled_from([small_archive, lightning_corpus["last.ckpt"].read_bytes()]))
    path = tmp_path / "mutated.pt"
    path.write_bytes(data.draw(mutated(original)))
    assert_same_or_refused(path)


def test_an_archive_inside_a_larger_file_reads_as_torch_reads_it_alone(small_archive: bytes, tmp_path: Path) -> None:
    alone, inside = tmp_path / "alone.pt", tmp_path / "inside.bin"
    alone.write_bytes(small_archive)
    inside.write_bytes(b"\x00" * 100 + small_archive + b"trailing bytes of the container")
    theirs = torch_records(alone)
    archive = ZipArchive(inside, start=100, end=100 + len(small_archive))
    try:
        assert {record.name: archive.read(record.offset, record.size) for record in archive.records.values()} == theirs
    finally:
        archive.close()
