"""The records of a torch.save zip archive, located the way torch's own reader (miniz) locates them.

Zip leaves room for two readers to disagree about what an archive holds: the end record can point at
a central directory other than the one before it, a Zip64 locator at another end record, two entries
can share a name (or differ only in case, which miniz ignores when it looks a name up), local headers
can name other files than the directory, bytes can hide before, between or after the records. An
attacker uses that to show a scanner a benign `data.pkl` while `torch.load` unpickles another one.

So the archive is parsed the way miniz parses it (the end record found scanning back from the end,
the Zip64 end record found through its locator, the root folder taken from the first entry, names
looked up without regard to ASCII case), and is then accepted only when its layout leaves nothing to
interpret: records tile the file from byte 0 in the order of their offsets, each followed only by
the data descriptor its flags announce; the central directory follows them and is followed only by
the end records and the end of the file. Anything else is an `AmbiguousArchiveError`.

Structure is read with `pread` (`_source.py`), never through the mmap, so that locating records does
not map page-cache pages into the process; the mmap serves tensor bytes, which callers stream on
demand. A remote archive is read the same way by ranged requests.

The module does one job, kept whole: locating the records and refusing a layout that leaves room to
interpret are one parse.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .._crc32 import crc32
from .._dataclass import dataclass
from .._exceptions import AmbiguousArchiveError, CorruptCheckpointError, UnsupportedFormatError
from .._storage import Location, location
from ._source import STREAM_CHUNK, ByteSource, open_source
from ._names import ZIP_MAGIC

__all__ = ["ArchiveRecord", "ZipArchive"]

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")
_CENTRAL_SIG, _END_SIG = b"PK\x01\x02", b"PK\x05\x06"
_ZIP64_END_SIG, _ZIP64_LOCATOR_SIG, _DESCRIPTOR_SIG = b"PK\x06\x06", b"PK\x06\x07", b"PK\x07\x08"
_ZIP64_EXTRA = 0x0001
_END_SEARCH = 0xFFFF + _END.size + 4096
"""How far back from the end miniz looks for the end record (a maximal comment, plus its read block)."""
_U16, _U32 = 0xFFFF, 0xFFFFFFFF
_DATA_DESCRIPTOR, _UTF8 = 0x0008, 0x0800
_KNOWN_FLAGS = _DATA_DESCRIPTOR | _UTF8
_DOS_DIRECTORY = 0x10
_READ_AHEAD = 4096
_STORED = 0


@dataclass(frozen=True)
class ArchiveRecord:
    """One record: its name without the archive root, and where its bytes lie in the file."""

    name: str
    offset: int
    size: int
    method: int = _STORED
    """Zip compression method; torch.save writes 0 (stored) for every record."""
    crc32: int = 0
    """The CRC-32 (zlib's) the central directory records for the bytes."""

    @property
    def end(self) -> int:
        return self.offset + self.size


class ZipArchive:
    """A torch zip archive opened for reading: its root folder, its records and their bytes.

    The archive may be a slice `[start, end)` of a larger file (a torch.save blob inside another
    container): offsets inside the archive count from `start`, and every `ArchiveRecord.offset`
    is absolute in the file.
    """

    def __init__(self, path: str | Location, start: int = 0, end: int | None = None) -> None:
        self.path = location(path)
        self._source = open_source(self.path)
        try:
            window = _Window(self._source, start, self._source.size if end is None else end)
            self.root, self.records = _Layout(window).records()
        except BaseException:
            self._source.close()
            raise

    @property
    def size(self) -> int:
        return self._source.size

    @property
    def closed(self) -> bool:
        return self._source.closed

    def close(self) -> None:
        self._source.close()

    def record(self, name: str) -> ArchiveRecord | None:
        """The record torch finds under `name` (relative to the root; ASCII case does not matter to it)."""
        return self.records.get(_lookup_key(name))

    @property
    def records_crc32(self) -> bool:
        """Whether the writer recorded CRC-32s: torch saving with `compute_crc32=False` (its
        `torch.utils.serialization.config.save` option) writes 0 for every record, even `data.pkl`."""
        return any(record.crc32 for record in self.records.values())

    def crc32(self, record: ArchiveRecord) -> int:
        """The CRC-32 of the record's bytes as they are now, streamed a bounded chunk at a time."""
        value = 0
        for chunk in self.stream(record.offset, record.size):
            value = crc32(chunk, value)
        return value

    def require_stored(self) -> None:
        """Refuse compressed records: torch inflates them when loading, while ckptspec reads a record's
        bytes where they lie in the file, so what it would judge is not what torch unpickles."""
        for record in self.records.values():
            if record.method != _STORED:
                raise AmbiguousArchiveError(
                    f"{self.path}: ambiguous zip archive: record {self.root}/{record.name} is compressed "
                    f"(zip method {record.method}); torch inflates it when loading, ckptspec checks bytes as stored"
                )

    def read(self, offset: int, size: int) -> bytes:
        """Copy `size` bytes at absolute `offset` (for small records such as `data.pkl`)."""
        data = self._source.pread(offset, size)
        if len(data) != size:
            raise _truncated(self.path, offset + size, offset + len(data))
        return data

    def stream(self, offset: int, size: int, chunk: int = STREAM_CHUNK) -> Iterator[memoryview]:
        """`[offset, offset + size)` in slices of at most `chunk` bytes, memory flat however large."""
        return self._source.stream(offset, size, chunk)

    def view(self, offset: int, size: int) -> memoryview:
        """A view of `[offset, offset + size)`; release it before closing the archive."""
        return self._source.view(offset, size)


def _truncated(path: Location, needed: int, present: int) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"{path}: needs bytes up to {needed} but ends at {present}; the file is truncated")


def _lookup_key(name: str) -> str:
    """How miniz compares names: byte for byte, ASCII letters folded to lower case."""
    if name.isascii():
        return name.lower()
    return name.encode("utf-8", "surrogateescape").lower().decode("utf-8", "surrogateescape")


@dataclass
class _Window:
    """Bytes `[start, end)` of an open file, read by offsets counted from `start`.

    A small read fetches the block of `_READ_AHEAD` bytes it begins, and later reads inside that
    block are served from it: a record's local header, its name, and the data descriptor that ends
    the record before it (with the next header behind it) then cost one system call, not three."""

    source: ByteSource
    start: int
    end: int
    _block: tuple[int, bytes] = (0, b"")

    @property
    def path(self) -> Location:
        return self.source.path

    @property
    def size(self) -> int:
        return self.end - self.start

    def read(self, offset: int, size: int) -> bytes:
        size = max(0, min(size, self.end - self.start - offset))
        block_at, block = self._block
        if block_at <= offset and offset + size <= block_at + len(block):
            return block[offset - block_at : offset - block_at + size]
        if size > _READ_AHEAD:
            return self.source.pread(self.start + offset, size)
        block = self.source.pread(self.start + offset, max(size, min(_READ_AHEAD, self.size - offset)))
        self._block = (offset, block)
        return block[:size]

    def read_exactly(self, offset: int, size: int, what: str, record: _Entry | None = None) -> bytes:
        """`size` bytes at `offset`, which hold `what` (of `record`, named only in the error)."""
        data = self.read(offset, size)
        if len(data) != size:
            raise self.truncated(offset, size, what, record)
        return data

    def truncated(self, offset: int, size: int, what: str, record: _Entry | None = None) -> CorruptCheckpointError:
        of = f" of {record.text}" if record is not None else ""
        return CorruptCheckpointError(
            f"{self.path}: {what}{of} at byte {offset} needs {size} bytes but the archive ends at {self.size}; "
            "the file is truncated"
        )


@dataclass(frozen=True)
class _Entry:
    """A central-directory entry, with the sizes and offset its Zip64 field may carry instead."""

    name: bytes
    flags: int
    method: int
    crc32: int
    size: int
    stored_size: int
    local_offset: int

    @property
    def text(self) -> str:
        return self.name.decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class _Directory:
    offset: int
    size: int
    entries: int
    end: int
    """Where the end records begin: the directory must end exactly there."""


class _Layout:
    """One pass over an archive's structure, refusing whatever two zip readers could read differently."""

    def __init__(self, window: _Window) -> None:
        self._window = window
        self._path = window.path

    def records(self) -> tuple[str, dict[str, ArchiveRecord]]:
        if self._window.read(0, len(ZIP_MAGIC)) != ZIP_MAGIC:
            raise UnsupportedFormatError(
                f"{self._path}: not a zip archive (torch.save files start with PK\\x03\\x04)"
            )
        directory = self._directory()
        entries = self._entries(directory)
        root = self._root(entries)
        offsets = self._tile(entries, directory.offset)
        records = {}
        for entry in entries:
            name = entry.name[len(root) + 1 :].decode("utf-8")
            offset = self._window.start + offsets[entry.name]
            records[_lookup_key(name)] = ArchiveRecord(name, offset, entry.stored_size, entry.method, entry.crc32)
        return root.decode("utf-8"), records

    def _ambiguous(self, detail: str) -> AmbiguousArchiveError:
        return AmbiguousArchiveError(f"{self._path}: ambiguous zip archive: {detail}")

    def _multi_disk(self) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"{self._path}: bad zip directory: it spans several disks, which torch.save never writes"
        )

    # --- end records ---------------------------------------------------------------------------

    def _directory(self) -> _Directory:
        end_at = self._end_record_offset()
        (_, disk, directory_disk, entries_here, entries, size, offset, comment) = _END.unpack(
            self._window.read_exactly(end_at, _END.size, "the end-of-central-directory record")
        )
        if end_at + _END.size + comment != self._window.size:
            raise self._ambiguous(
                f"{self._window.size - end_at - _END.size} bytes follow the end-of-central-directory record "
                f"at byte {end_at}, whose comment is {comment} bytes long"
            )
        if disk or directory_disk or entries_here != entries:
            raise self._multi_disk()
        directory = _Directory(offset, size, entries, end_at)
        zip64 = self._zip64_directory(end_at)
        if zip64 is not None:
            for field, narrow, sentinel in (("entries", entries, _U16), ("size", size, _U32), ("offset", offset, _U32)):
                if narrow not in (getattr(zip64, field), sentinel):
                    raise self._ambiguous(
                        f"the end record gives the central directory {field} {narrow}, "
                        f"its Zip64 end record {getattr(zip64, field)}"
                    )
            directory = zip64
        if directory.offset + directory.size != directory.end:
            raise self._ambiguous(
                f"the end record places the central directory at bytes {directory.offset}.."
                f"{directory.offset + directory.size}, but the end records start at byte {directory.end}"
            )
        return directory

    def _end_record_offset(self) -> int:
        """The last end-record signature with room for a record after it, as miniz searches for it."""
        first = max(0, self._window.size - _END_SEARCH)
        tail = self._window.read(first, self._window.size - first)
        found = tail.rfind(_END_SIG, 0, max(0, len(tail) - _END.size + len(_END_SIG)))
        if found < 0:
            raise CorruptCheckpointError(
                f"{self._path}: bad zip directory (no end-of-central-directory record); "
                "the file is truncated or was not fully written"
            )
        return first + found

    def _zip64_directory(self, end_at: int) -> _Directory | None:
        locator_at = end_at - _ZIP64_LOCATOR.size
        if locator_at < 0:
            return None
        locator = self._window.read(locator_at, _ZIP64_LOCATOR.size)
        if locator[:4] != _ZIP64_LOCATOR_SIG:
            return None
        _, directory_disk, record_at, disks = _ZIP64_LOCATOR.unpack(locator)
        if directory_disk != 0 or disks != 1:
            raise self._multi_disk()
        record = self._window.read(record_at, _ZIP64_END.size)
        if len(record) != _ZIP64_END.size or record[:4] != _ZIP64_END_SIG:
            raise self._ambiguous(
                f"the Zip64 locator at byte {locator_at} points at byte {record_at}, where no Zip64 end record is"
            )
        (_, length, _, _, disk, directory_disk, entries_here, entries, size, offset) = _ZIP64_END.unpack(record)
        if record_at + 12 + length != locator_at or length < _ZIP64_END.size - 12:
            raise self._ambiguous(
                f"the Zip64 locator at byte {locator_at} points at a Zip64 end record at byte {record_at} "
                f"that does not end where the locator begins"
            )
        if disk or directory_disk or entries_here != entries:
            raise self._multi_disk()
        return _Directory(offset, size, entries, record_at)

    # --- central directory ------------------------------------------------------------------------

    def _entries(self, directory: _Directory) -> list[_Entry]:
        if directory.entries == 0:
            raise CorruptCheckpointError(f"{self._path}: the zip archive holds no records")
        if directory.entries * _CENTRAL.size > directory.size:
            raise CorruptCheckpointError(
                f"{self._path}: bad zip directory: it claims {directory.entries} entries, but its "
                f"{directory.size} bytes hold at most {directory.size // _CENTRAL.size}"
            )
        data = self._window.read_exactly(directory.offset, directory.size, "the central directory")
        entries, at = [], 0
        for _ in range(directory.entries):
            entry, at = self._entry(data, at, directory.offset)
            entries.append(entry)
        if at != directory.size:
            raise self._ambiguous(
                f"{directory.size - at} bytes follow the last of the {directory.entries} central-directory "
                "entries the end record counts"
            )
        self._unique_names(entries)
        return entries

    def _entry(self, data: bytes, at: int, base: int) -> tuple[_Entry, int]:
        if at + _CENTRAL.size > len(data) or data[at : at + 4] != _CENTRAL_SIG:
            raise CorruptCheckpointError(f"{self._path}: bad zip directory: no central-directory entry at byte {base + at}")
        (_, _, _, flags, method, _, _, crc, stored, size, name_length, extra_length, comment_length,
         disk, _, attributes, local_offset) = _CENTRAL.unpack_from(data, at)  # fmt: skip
        name_at = at + _CENTRAL.size
        following = name_at + name_length + extra_length + comment_length
        if following > len(data):
            raise CorruptCheckpointError(f"{self._path}: bad zip directory: the entry at byte {base + at} runs past its end")
        name = data[name_at : name_at + name_length]
        extra = data[name_at + name_length : name_at + name_length + extra_length]
        if extra or _U32 in (size, stored, local_offset):
            size, stored, local_offset = self._zip64_values(name, extra, size, stored, local_offset)
        entry = _Entry(name, flags, method, crc, size, stored, local_offset)
        if attributes & _DOS_DIRECTORY or name.endswith(b"/"):
            raise self._ambiguous(f"{entry.text} is marked as a folder, which torch reads as empty whatever its bytes")
        if disk != 0:
            raise self._multi_disk()
        self._plain(entry)
        return entry, following

    def _zip64_values(self, name: bytes, extra: bytes, size: int, stored: int, offset: int) -> tuple[int, int, int]:
        """The values set to 0xFFFFFFFF, from the Zip64 field; one such field only (readers pick different ones)."""
        fields = _extra_fields(extra)
        if fields is None:
            raise self._ambiguous(f"the extra field of {name!r} in the central directory is malformed")
        zip64 = [value for kind, value in fields if kind == _ZIP64_EXTRA]
        if len(zip64) > 1:
            raise self._ambiguous(f"{name!r} has {len(zip64)} Zip64 fields in the central directory")
        if _U32 not in (size, stored, offset):
            return size, stored, offset
        wide = zip64[0] if zip64 else b""
        values = []
        for value in (size, stored, offset):
            if value == _U32:
                if len(wide) < 8:
                    raise CorruptCheckpointError(f"{self._path}: bad zip directory: {name!r} lacks its Zip64 sizes")
                value, wide = int.from_bytes(wide[:8], "little"), wide[8:]
            values.append(value)
        return values[0], values[1], values[2]

    def _plain(self, entry: _Entry) -> None:
        if entry.flags & ~_KNOWN_FLAGS:
            raise CorruptCheckpointError(
                f"{self._path}: record {entry.text} has zip flags {entry.flags:#06x}: encryption or other "
                "features torch.save never uses and torch refuses"
            )
        if entry.method == _STORED and entry.size != entry.stored_size:
            raise CorruptCheckpointError(
                f"{self._path}: bad zip directory: stored record {entry.text} has {entry.stored_size} bytes "
                f"in the file but {entry.size} when read"
            )
        if b"\x00" in entry.name:
            raise self._ambiguous(f"the record name {entry.name!r} holds a NUL byte, where readers cut it differently")
        try:
            entry.name.decode("utf-8")
        except UnicodeDecodeError:
            raise self._ambiguous(f"the record name {entry.name!r} is not UTF-8, which readers decode differently") from None

    def _unique_names(self, entries: list[_Entry]) -> None:
        seen: dict[bytes, _Entry] = {}
        for entry in entries:
            earlier = seen.setdefault(entry.name.lower(), entry)
            if earlier is not entry:
                same = "twice" if earlier.name == entry.name else f"also as {earlier.text} (torch ignores ASCII case)"
                raise self._ambiguous(f"the record {entry.text} is named {same}; readers pick different copies")

    def _root(self, entries: list[_Entry]) -> bytes:
        """The folder before the first `/` of the first entry's name, as torch's reader takes it."""
        root, slash, _ = entries[0].name.partition(b"/")
        pickle = (root + b"/data.pkl").lower()
        if not slash or not root or all(entry.name.lower() != pickle for entry in entries):
            shown = ", ".join(entry.text for entry in entries[:3])
            shown += f" and {len(entries) - 3} more" if len(entries) > 3 else ""
            raise UnsupportedFormatError(
                f"{self._path}: a zip archive, but not a torch.save archive: it has no FOLDER/data.pkl record, "
                f"which torch.save always writes (it holds {shown})"
            )
        for entry in entries:
            if not entry.name.startswith(root + b"/"):
                raise CorruptCheckpointError(
                    f"{self._path}: record {entry.text} lies outside the archive folder {root.decode()}/"
                )
        return root

    # --- local headers and the bytes between them ---------------------------------------------------

    def _tile(self, entries: list[_Entry], directory_offset: int) -> dict[bytes, int]:
        """Where each record's data starts, checking that records cover the bytes up to the directory exactly."""
        data_offsets, expected = {}, 0
        for entry in sorted(entries, key=lambda entry: entry.local_offset):
            if entry.local_offset != expected:
                raise self._ambiguous(self._misplaced(entry.local_offset, expected, entry.text))
            data_offset = self._local_header(entry)
            expected = data_offset + entry.stored_size + self._descriptor(entry, data_offset + entry.stored_size)
            data_offsets[entry.name] = data_offset
        if expected != directory_offset:
            raise self._ambiguous(self._misplaced(directory_offset, expected, "the central directory"))
        return data_offsets

    @staticmethod
    def _misplaced(found: int, expected: int, what: str) -> str:
        if found > expected:
            return f"{found - expected} unaccounted bytes at {expected}..{found}, before {what}"
        return f"{what} starts at byte {found}, inside the record that ends at byte {expected} (records overlap)"

    def _local_header(self, entry: _Entry) -> int:
        # One read for the header and the name the directory gives (the local one should repeat it).
        block = self._window.read(entry.local_offset, _LOCAL.size + len(entry.name))
        if len(block) < _LOCAL.size:
            raise self._window.truncated(entry.local_offset, _LOCAL.size, "the local header", entry)
        (signature, _, flags, method, _, _, crc, stored, size, name_length, extra_length) = _LOCAL.unpack_from(block)
        if signature != ZIP_MAGIC:
            raise CorruptCheckpointError(
                f"{self._path}: record {entry.text} has no local header at byte {entry.local_offset}"
            )
        name = block[_LOCAL.size : _LOCAL.size + name_length]
        if len(name) != name_length:
            name = self._window.read_exactly(entry.local_offset + _LOCAL.size, name_length, "the local name", entry)
        if name != entry.name:
            raise self._ambiguous(
                f"the local header at byte {entry.local_offset} names {name!r}, the central directory {entry.name!r}"
            )
        if method != entry.method or flags != entry.flags:
            raise self._ambiguous(f"the local header of {entry.text} gives other flags or compression than the directory")
        if not flags & _DATA_DESCRIPTOR and (crc, stored, size) not in self._local_sizes(entry):
            raise self._ambiguous(f"the local header of {entry.text} gives another CRC-32 or size than the directory")
        return entry.local_offset + _LOCAL.size + name_length + extra_length

    @staticmethod
    def _local_sizes(entry: _Entry) -> tuple[tuple[int, int, int], ...]:
        return ((entry.crc32, entry.stored_size, entry.size), (entry.crc32, _U32, _U32))

    def _descriptor(self, entry: _Entry, at: int) -> int:
        """The length of the data descriptor after the record's bytes: 0 when its flags announce none.

        Its sizes must repeat the directory's, or a reader walking local headers finds other records;
        its CRC-32 is left to `TorchCheckpoint.verify`, which reports a mismatch as damage."""
        if not entry.flags & _DATA_DESCRIPTOR:
            return 0
        descriptor = self._window.read(at, 24)
        if descriptor[:4] == _DESCRIPTOR_SIG:
            if descriptor[8:24] == struct.pack("<2Q", entry.stored_size, entry.size):
                return 24
            if entry.stored_size < _U32 and descriptor[8:16] == struct.pack("<2L", entry.stored_size, entry.size):
                return 16
        raise self._ambiguous(f"the data descriptor after {entry.text} (byte {at}) does not repeat its sizes")


def _extra_fields(extra: bytes) -> list[tuple[int, bytes]] | None:
    """The (id, data) fields of a zip extra block; None when they do not fill it exactly."""
    fields, at = [], 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, at)
        if at + 4 + length > len(extra):
            return None
        fields.append((kind, extra[at + 4 : at + 4 + length]))
        at += 4 + length
    return fields if at == len(extra) else None
