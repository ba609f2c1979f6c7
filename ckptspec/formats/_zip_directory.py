"""A zip archive's directory as `zipfile` parses it, over a read-only map: for zips that are not
torch.save archives (`.keras`), whose members' bytes are then read in place from the map."""

from __future__ import annotations

import mmap
import struct
import zipfile
from pathlib import Path

from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from ._names import ZIP_MAGIC

__all__ = ["central_directory", "data_offset"]

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")


def central_directory(path: Path, data: mmap.mmap) -> list[zipfile.ZipInfo]:
    if data[:4] != ZIP_MAGIC:
        raise UnsupportedFormatError(f"{path}: not a zip archive (it does not start with PK\\x03\\x04)")
    try:
        with zipfile.ZipFile(_MmapReader(data)) as archive:
            return archive.infolist()
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpointError(f"{path}: bad zip directory ({exc}); the file is truncated or was not fully written") from None
    except (ValueError, OverflowError, struct.error, NotImplementedError) as exc:
        # zipfile raises NotImplementedError for a damaged "version needed" or compression field.
        raise CorruptCheckpointError(f"{path}: bad zip directory ({exc})") from None


def data_offset(path: Path, data: mmap.mmap, info: zipfile.ZipInfo) -> int:
    """Where a member's bytes start: after its local header, whose name and extra lengths are its own."""
    start = info.header_offset
    header = data[start : start + _LOCAL_HEADER.size]
    if len(header) < _LOCAL_HEADER.size or header[:4] != ZIP_MAGIC:
        raise CorruptCheckpointError(f"{path}: member {info.filename} has no local header at byte {start}")
    *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    return start + _LOCAL_HEADER.size + name_length + extra_length


class _MmapReader:
    """The file-object face `zipfile` needs, over the map, so the directory is not read twice."""

    def __init__(self, data: mmap.mmap) -> None:
        self._data = data
        self._position = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: len(self._data)}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._position + size
        chunk = self._data[self._position : end]
        self._position += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return True
