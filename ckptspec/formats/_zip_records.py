"""The records of a torch.save zip archive, located once and read through one read-only mmap.

`zipfile` parses the central directory (it already handles Zip64); the data itself is never read
through `zipfile`: each record's bytes start right after its local header, and are sliced from the mmap.
Each record's CRC-32 comes from the central directory: torch writes its local headers with the data
descriptor flag and a CRC of 0, and the real value after the data and in the central directory.
"""

from __future__ import annotations

import mmap
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._io import unreadable
from .detect import ZIP_MAGIC

__all__ = ["ArchiveRecord", "ZipArchive"]

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_STORED = 0
_STREAM_CHUNK = 16 << 20


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
    """A torch zip archive opened for reading: its root folder, its records and their bytes."""

    def __init__(self, path: str | Path, window: tuple[int, int] | None = None) -> None:
        """`window` is `(offset, length)` of an archive embedded in a larger file (a DCP slice);
        record offsets stay absolute in the file."""
        self.path = Path(path)
        self._mmap = _map_file(self.path)
        try:
            base, length = window if window is not None else (0, len(self._mmap))
            if base < 0 or length < 0 or base + length > len(self._mmap):
                raise CorruptCheckpointError(
                    f"{self.path}: bytes {base}..{base + length} lie past the end of the file "
                    f"({len(self._mmap)} bytes); the file is truncated"
                )
            self.root, self.records = _locate_records(self.path, self._mmap, base, base + length)
        except BaseException:
            self._mmap.close()
            raise

    @property
    def size(self) -> int:
        return len(self._mmap)

    @property
    def closed(self) -> bool:
        return self._mmap.closed

    def close(self) -> None:
        self._mmap.close()

    def record(self, name: str) -> ArchiveRecord | None:
        return self.records.get(name)

    @property
    def records_crc32(self) -> bool:
        """Whether the writer recorded CRC-32s: torch saving with `compute_crc32=False` (its
        `torch.utils.serialization.config.save` option) writes 0 for every record, even `data.pkl`."""
        return any(record.crc32 for record in self.records.values())

    def crc32(self, record: ArchiveRecord) -> int:
        """The CRC-32 of the record's bytes as they are now, streamed a bounded chunk at a time."""
        value = 0
        for chunk in self.stream(record.offset, record.size):
            value = zlib.crc32(chunk, value)
        return value

    def require_stored(self) -> None:
        """Refuse compressed records: their bytes are not the data, so no offset into the file is right."""
        for record in self.records.values():
            if record.method != _STORED:
                raise UnsupportedFormatError(
                    f"{self.path}: record {self.root}/{record.name} is compressed (zip method {record.method}); "
                    "torch.save stores every record uncompressed, so another tool rewrote this archive"
                )

    def read(self, offset: int, size: int) -> bytes:
        """Copy `size` bytes at absolute `offset` (for small records such as `data.pkl`)."""
        return self.view(offset, size).tobytes()

    def stream(self, offset: int, size: int, chunk: int = _STREAM_CHUNK) -> Iterator[memoryview]:
        """Zero-copy slices of the mmap covering `[offset, offset + size)`, at most `chunk` bytes each.

        Pages already consumed are released from this process (`MADV_DONTNEED` on a read-only file
        mapping only drops them from our resident set), so hashing a 1 GiB tensor stays flat in memory.
        """
        view = self.view(offset, size)
        try:
            for start in range(0, size, chunk):
                piece = view[start : start + chunk]
                try:
                    yield piece
                finally:
                    piece.release()
                    self._drop_pages(offset + start, min(chunk, size - start))
        finally:
            view.release()

    def view(self, offset: int, size: int) -> memoryview:
        """A zero-copy view of `[offset, offset + size)`; release it before closing the archive."""
        if self._mmap.closed:
            raise ReaderError(f"{self.path}: the checkpoint was closed; reopen it to read tensor bytes")
        if offset < 0 or size < 0 or offset + size > len(self._mmap):
            raise CorruptCheckpointError(
                f"{self.path}: bytes {offset}..{offset + size} lie past the end of the file "
                f"({len(self._mmap)} bytes); the file is truncated"
            )
        return memoryview(self._mmap)[offset : offset + size]

    def _drop_pages(self, offset: int, size: int) -> None:
        first_page = offset - offset % mmap.PAGESIZE
        if hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED, first_page, offset + size - first_page)
            except OSError:
                pass  # only a memory optimisation; the bytes already read are correct either way


def _map_file(path: Path) -> mmap.mmap:
    try:
        with path.open("rb") as handle:
            if path.stat().st_size == 0:
                raise CorruptCheckpointError(f"{path}: empty file")
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except IsADirectoryError:
        raise UnsupportedFormatError(f"{path}: a directory, not a torch.save file") from None
    except OSError as exc:
        raise unreadable(path, exc) from None


def _locate_records(path: Path, data: mmap.mmap, base: int, end: int) -> tuple[str, dict[str, ArchiveRecord]]:
    infos = _central_directory(path, data, base, end)
    if not infos:
        raise CorruptCheckpointError(f"{path}: the zip archive holds no records")
    root = _archive_root(path, infos)
    records: dict[str, ArchiveRecord] = {}
    for info in infos:
        name = info.filename[len(root) + 1 :]
        record = ArchiveRecord(name, _data_offset(path, data, info, base), info.compress_size, info.compress_type, info.CRC)
        if record.end > end:
            raise CorruptCheckpointError(
                f"{path}: record {info.filename} ends at byte {record.end} but the archive ends at byte "
                f"{end}; it is truncated"
            )
        records[name] = record
    return root, records


def _central_directory(path: Path, data: mmap.mmap, base: int, end: int) -> list[zipfile.ZipInfo]:
    if data[base : base + 4] != ZIP_MAGIC:
        where = f" at byte {base}" if base else ""
        raise UnsupportedFormatError(f"{path}: not a zip archive{where} (torch.save files start with PK\\x03\\x04)")
    try:
        with zipfile.ZipFile(_MmapReader(data, base, end)) as archive:
            return archive.infolist()
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpointError(
            f"{path}: bad zip directory ({exc}); the file is truncated or was not fully written"
        ) from None
    except (ValueError, OverflowError, struct.error, NotImplementedError) as exc:
        # zipfile raises NotImplementedError for a damaged "version needed" or compression field.
        raise CorruptCheckpointError(f"{path}: bad zip directory ({exc})") from None


def _archive_root(path: Path, infos: list[zipfile.ZipInfo]) -> str:
    """The folder holding `data.pkl`, which every record of a torch.save archive lies inside."""
    pickles = [info.filename for info in infos if _is_root_pickle(info.filename)]
    if not pickles:
        raise UnsupportedFormatError(
            f"{path}: a zip archive, but not a torch.save archive: it has no FOLDER/data.pkl record, "
            f"which torch.save always writes (it holds {_first_names(infos)})"
        )
    root = pickles[0].partition("/")[0]
    for info in infos:
        if not info.filename.startswith(root + "/"):
            raise CorruptCheckpointError(
                f"{path}: record {info.filename} lies outside the archive folder {root}/"
            )
    return root


def _is_root_pickle(name: str) -> bool:
    folder, slash, rest = name.partition("/")
    return bool(folder) and bool(slash) and rest == "data.pkl"


def _first_names(infos: list[zipfile.ZipInfo], shown: int = 3) -> str:
    names = ", ".join(info.filename for info in infos[:shown])
    return names + (f" and {len(infos) - shown} more" if len(infos) > shown else "")


def _data_offset(path: Path, data: mmap.mmap, info: zipfile.ZipInfo, base: int) -> int:
    start = base + info.header_offset
    header = data[start : start + _LOCAL_HEADER.size]
    if len(header) < _LOCAL_HEADER.size or header[:4] != ZIP_MAGIC:
        raise CorruptCheckpointError(f"{path}: record {info.filename} has no local header at byte {start}")
    *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    return start + _LOCAL_HEADER.size + name_length + extra_length


class _MmapReader:
    """The file-object face `zipfile` needs, over `[base, end)` of the mmap, so the directory is not
    read twice. Positions are relative to `base`."""

    def __init__(self, data: mmap.mmap, base: int, end: int) -> None:
        self._data = data
        self._base = base
        self._length = end - base
        self._position = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        origin = {0: 0, 1: self._position, 2: self._length}[whence]
        self._position = max(0, origin + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        end = self._length if size < 0 else min(self._position + size, self._length)
        chunk = self._data[self._base + self._position : self._base + max(end, self._position)]
        self._position += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return True
