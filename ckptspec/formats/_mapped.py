"""A file that is not a zip archive, read through `ZipArchive`'s byte access.

Legacy torch files and safetensors files keep tensor bytes at offsets their headers give. Naming
each such range as an `ArchiveRecord` of a `MappedFile` lets `TensorRef` stream, hash and gather
them exactly as it does for a torch zip archive: one read-only mmap (or ranged requests, for a
remote file), bounded chunks, pages released after reading.

The shards of one checkpoint share an `OpenFiles`: each open local file holds two descriptors (its
handle and its mapping), so an index of thousands of shards keeps only the last few read open and
reopens the others when they are read again.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from .._exceptions import CorruptCheckpointError
from .._storage import Location, location
from ._source import ByteSource, LocalSource, open_source
from ._zip_records import ArchiveRecord, ZipArchive

__all__ = ["MappedFile", "OpenFiles"]

OPEN_SHARDS = 32
"""Shard files of one checkpoint kept open at once: 64 descriptors, a quarter of the lowest usual soft limit (256)."""


class OpenFiles:
    """The local files of one checkpoint that are open, at most `limit`; the least recently read is closed."""

    def __init__(self, limit: int = OPEN_SHARDS) -> None:
        self._limit = limit
        self._open: OrderedDict[int, MappedFile] = OrderedDict()

    def read(self, file: MappedFile) -> None:
        """Note that `file` is being read, closing the least recently read ones beyond the limit."""
        self._open[id(file)] = file
        self._open.move_to_end(id(file))
        if len(self._open) > self._limit:
            for key, oldest in list(self._open.items())[: len(self._open) - self._limit]:
                if oldest._park():
                    del self._open[key]

    def forget(self, file: MappedFile) -> None:
        self._open.pop(id(file), None)


class MappedFile(ZipArchive):
    """The file at `path`, opened read-only; `records` are filled in by the reader that parsed it.

    With `shared`, the file may be closed while others are read and is reopened when read again,
    once it is known to be the same file (device, inode, size and modification time unchanged).
    """

    def __init__(self, path: str | Location, root: str, *, shared: OpenFiles | None = None) -> None:  # noqa: D107 - no zip directory to parse
        self.path = location(path)
        self._opened: ByteSource = open_source(self.path)
        self._parked = False
        self._shared = shared if isinstance(self._opened, LocalSource) else None
        self._identity = _identity(self._opened) if self._shared is not None else None
        self.root = root
        """The name messages give the file's records: `storages/data/<key>`, `tensors/<name>`."""
        self.records: dict[str, ArchiveRecord] = {}
        if self._shared is not None:
            self._shared.read(self)

    @property
    def _source(self) -> ByteSource:
        if self._parked:
            self._reopen()
        if self._shared is not None:
            self._shared.read(self)
        return self._opened

    @property
    def size(self) -> int:
        return self._opened.size

    @property
    def closed(self) -> bool:
        return not self._parked and self._opened.closed

    def close(self) -> None:
        self._parked = False
        self._opened.close()
        if self._shared is not None:
            self._shared.forget(self)

    def _park(self) -> bool:
        """Close the file until it is read again; not while a view of its bytes is still held."""
        if self._opened.closed:
            return True
        try:
            self._opened.close()
        except BufferError:
            return False
        self._parked = True
        return True

    def _reopen(self) -> None:
        source = open_source(self.path)
        if not isinstance(source, LocalSource) or _identity(source) != self._identity:
            source.close()
            raise CorruptCheckpointError(f"{self.path}: changed while it was being read; judge it again once it is no longer written")
        self._opened, self._parked = source, False


def _identity(source: LocalSource) -> tuple[int, int, int, int]:
    status = os.fstat(source.fileno())
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
