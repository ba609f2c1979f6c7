"""A file that is not a zip archive, read through `ZipArchive`'s byte access.

Legacy torch files and safetensors files keep tensor bytes at offsets their headers give. Naming
each such range as an `ArchiveRecord` of a `MappedFile` lets `TensorRef` stream, hash and gather
them exactly as it does for a torch zip archive: one read-only mmap (or ranged requests, for a
remote file), bounded chunks, pages released after reading.
"""

from __future__ import annotations

from .._storage import Location, location
from ._source import open_source
from ._zip_records import ArchiveRecord, ZipArchive

__all__ = ["MappedFile"]


class MappedFile(ZipArchive):
    """The file at `path`, opened read-only; `records` are filled in by the reader that parsed it."""

    def __init__(self, path: str | Location, root: str) -> None:  # noqa: D107 - no zip directory to parse
        self.path = location(path)
        self._source = open_source(self.path)
        self.root = root
        """The name messages give the file's records: `storages/data/<key>`, `tensors/<name>`."""
        self.records: dict[str, ArchiveRecord] = {}
