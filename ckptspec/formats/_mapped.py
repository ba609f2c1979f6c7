"""A file that is not a zip archive, read through `ZipArchive`'s byte access.

Legacy torch files and safetensors files keep tensor bytes at offsets their headers give. Naming
each such range as an `ArchiveRecord` of a `MappedFile` lets `TensorRef` stream, hash and gather
them exactly as it does for a torch zip archive: one read-only mmap, bounded chunks, pages released
after reading.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from ._zip_records import ArchiveRecord, ZipArchive, _open_file

__all__ = ["MappedFile"]


class MappedFile(ZipArchive):
    """The file at `path` mapped read-only; `records` are filled in by the reader that parsed it."""

    def __init__(self, path: Path, root: str) -> None:  # noqa: D107 - no zip directory to parse
        self.path = path
        self._handle = _open_file(path)
        try:
            self._mmap = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ)
        except BaseException:
            self._handle.close()
            raise
        self.root = root
        """The name messages give the file's records: `storages/data/<key>`, `tensors/<name>`."""
        self.records: dict[str, ArchiveRecord] = {}
