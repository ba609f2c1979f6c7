"""The bytes of one checkpoint file, local or remote, as the readers read them.

A local file is read the way it always was: structure by `pread`, tensor bytes through one
read-only mmap whose pages are released once streamed. A remote file (`RemotePath`) is read by
ranged requests: structure reads fetch a small window around what they ask for (zip local headers
and pickle records lie close together), and streaming fetches bounded chunks, each byte once.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from .._storage import STRUCTURE_BLOCK, Location, RemotePath, StoreError, open_binary, remote_errors
from ._io import unreadable

__all__ = ["STREAM_CHUNK", "ByteSource", "LocalSource", "RemoteSource", "open_source", "remote_files_watched"]

STREAM_CHUNK = 16 << 20


class ByteSource:
    """Random access to a file's bytes: `size`, `pread`, `stream`, `view` and `close`."""

    path: Location
    size: int

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def pread(self, offset: int, size: int) -> bytes:
        """Up to `size` bytes at `offset`; fewer only at the end of the file."""
        raise NotImplementedError

    def stream(self, offset: int, size: int, chunk: int = STREAM_CHUNK) -> Iterator[memoryview]:
        """`[offset, offset + size)` in slices of at most `chunk` bytes, valid until the next one."""
        raise NotImplementedError

    def view(self, offset: int, size: int) -> memoryview:
        """`[offset, offset + size)` at once (strided tensors are gathered from it); release it after use."""
        raise NotImplementedError

    def file(self) -> Any:
        """A seekable binary file object over the whole file (pickle opcode walks read through it)."""
        raise NotImplementedError

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise ReaderError(f"{self.path}: the checkpoint was closed; reopen it to read {what}")

    def _check_span(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise CorruptCheckpointError(
                f"{self.path}: bytes {offset}..{offset + size} lie past the end of the file "
                f"({self.size} bytes); the file is truncated"
            )


def open_source(path: Location, *, what: str = "a torch.save file") -> ByteSource:
    """The bytes of the file at `path`; `what` names the file kind a directory was taken for."""
    if isinstance(path, RemotePath):
        return RemoteSource(path, what)
    return LocalSource(path, what)


class LocalSource(ByteSource):
    """A local file: `pread` for structure, a read-only mmap for tensor bytes."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self._handle = _open_local(path, what)
        try:
            self._mmap = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:  # out of file descriptors or address space: each open file holds two
            self._handle.close()
            raise unreadable(path, exc) from None
        except BaseException:
            self._handle.close()
            raise
        self.size = len(self._mmap)

    @property
    def closed(self) -> bool:
        return self._mmap.closed

    def close(self) -> None:
        self._mmap.close()
        self._handle.close()

    def fileno(self) -> int:
        return self._handle.fileno()

    def pread(self, offset: int, size: int) -> bytes:
        if self._handle.closed:
            raise ReaderError(f"{self.path}: the checkpoint was closed; reopen it to read its records")
        parts: list[bytes] = []
        try:
            while size > 0:
                part = os.pread(self._handle.fileno(), min(size, 1 << 30), offset)
                if not part:
                    break
                parts.append(part)
                offset, size = offset + len(part), size - len(part)
        except OSError as exc:
            raise unreadable(self.path, exc) from None
        return b"".join(parts)

    def stream(self, offset: int, size: int, chunk: int = STREAM_CHUNK) -> Iterator[memoryview]:
        """Zero-copy slices of the mmap. Pages already consumed are released from this process
        (`MADV_DONTNEED` on a read-only file mapping only drops them from our resident set), so
        hashing a 1 GiB tensor stays flat in memory."""
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
        self._check_open("tensor bytes")
        self._check_span(offset, size)
        return memoryview(self._mmap)[offset : offset + size]

    def file(self) -> mmap.mmap:
        return self._mmap

    def _drop_pages(self, offset: int, size: int) -> None:
        first_page = offset - offset % mmap.PAGESIZE
        if hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED, first_page, offset + size - first_page)
            except OSError:
                pass  # only a memory optimisation; the bytes already read are correct either way


def _open_local(path: Path, what: str) -> IO[bytes]:
    try:
        handle = path.open("rb", buffering=0)
    except IsADirectoryError:
        raise UnsupportedFormatError(f"{path}: a directory, not {what}") from None
    except OSError as exc:
        raise unreadable(path, exc) from None
    try:
        if os.fstat(handle.fileno()).st_size == 0:
            raise CorruptCheckpointError(f"{path}: empty file")
    except BaseException:
        handle.close()
        raise
    return handle  # type: ignore[return-value]


class RemoteSource(ByteSource):
    """A file in an fsspec store, read by ranged requests; the last small window read is kept."""

    def __init__(self, path: RemotePath, what: str) -> None:
        self.path = path
        if path.is_dir():
            raise UnsupportedFormatError(f"{path}: a directory (a prefix), not {what}")
        self.size = path.stat().st_size
        if self.size == 0:
            raise CorruptCheckpointError(f"{path}: empty file")
        # An object rewritten in place (same key, same size) has other version tags: its cached
        # windows are never served for the new bytes.
        tags = _tags(path.info())
        self._key = (id(path.fs), path.path, self.size, str(sorted(tags.items())))
        watched = _WATCHED.get()
        if watched is not None:
            watched.setdefault(path, (self.size, tags))
        self._closed = False
        self._file: IO[bytes] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()

    def pread(self, offset: int, size: int) -> bytes:
        self._check_open("its records")
        size = max(0, min(size, self.size - offset))
        if size == 0:
            return b""
        cached = _WINDOWS.find(self._key, offset, size)
        if cached is not None:
            return cached
        if size > _LARGEST_WINDOW:
            return self._fetch(offset, size)
        length = max(size, STRUCTURE_BLOCK)
        start = min(offset, max(0, self.size - length))  # near the end, the window ends with the file
        window = self._fetch(start, min(length, self.size - start))
        _WINDOWS.add(self._key, start, window)
        return window[offset - start : offset - start + size]

    def stream(self, offset: int, size: int, chunk: int = STREAM_CHUNK) -> Iterator[memoryview]:
        self._check_open("tensor bytes")
        self._check_span(offset, size)
        if size <= STRUCTURE_BLOCK:
            # Small records (a DCP slice's, a zip's `byteorder`) lie side by side: one window serves many.
            yield memoryview(self.pread(offset, size))
            return
        for start in range(offset, offset + size, chunk):
            yield memoryview(self._fetch(start, min(chunk, offset + size - start)))

    def view(self, offset: int, size: int) -> memoryview:
        self._check_open("tensor bytes")
        self._check_span(offset, size)
        return memoryview(self._fetch(offset, size))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, span: slice) -> bytes:
        """`source[start:stop]`, as an mmap is sliced (readers of zip directories and HDF5 files do)."""
        start, stop, _step = span.indices(self.size)
        return self.pread(start, max(0, stop - start))

    def file(self) -> IO[bytes]:
        if self._file is None:
            self._file = open_binary(self.path, block=STRUCTURE_BLOCK)
        return self._file

    def _fetch(self, offset: int, size: int) -> bytes:
        data = remote_errors(self.path, lambda: self.path.fs.cat_file(self.path.path, start=offset, end=offset + size))
        if len(data) != size:
            # A read that failed, not damage in the file: the checkpoint is judged unreadable, never
            # set aside as a file of no known format.
            reason = f"needs bytes up to {offset + size} but the store returned {len(data)} of them (the object changed or is truncated)"
            raise StoreError(self.path, reason, errno.EIO)
        return bytes(data)



_LARGEST_WINDOW = 2 * STRUCTURE_BLOCK
"""Structure reads up to this size are kept (a zip's end-record search reads 68 KiB from the end);
larger ones, a pickle of megabytes, are fetched and not kept."""

_VERSION_TAGS = ("ETag", "etag", "generation", "version_id", "LastModified", "last_modified", "mtime", "created")
"""Where fsspec's stores give an object's version in `info` (S3, GCS, Azure; memory: creation time)."""


_TIME_TAGS = frozenset({"LastModified", "last_modified", "mtime", "created"})


def _tags(info: dict[str, Any]) -> dict[str, str]:
    """The version tags `info` has, each in one form whichever call gave it: a listing and a `stat` of
    one store can give the same time as a `datetime` and as seconds, an ETag with or without quotes."""
    return {tag: _time(info[tag]) if tag in _TIME_TAGS else str(info[tag]).strip('"') for tag in _VERSION_TAGS if info.get(tag) is not None}


def _time(value: Any) -> str:
    if isinstance(value, datetime):
        return f"{value.timestamp():.6f}"
    try:
        return f"{float(value):.6f}"
    except (TypeError, ValueError):
        try:
            return f"{datetime.fromisoformat(str(value)).timestamp():.6f}"
        except ValueError:
            return str(value)


_WATCHED: ContextVar[dict[RemotePath, tuple[int, dict[str, str]]] | None] = ContextVar("remote files watched", default=None)


@contextlib.contextmanager
def remote_files_watched() -> Iterator[Callable[[], list[tuple[RemotePath, str]]]]:
    """Inside it, each remote file opened is noted with its size and version; the function yielded
    asks the store again and returns `(path, what changed)` for each one rewritten since. Ranged reads
    cannot be pinned to one version in every store, so a file rewritten while it was judged is found
    afterwards: its verdict, from bytes of two versions, means nothing."""
    token = _WATCHED.set({})
    try:
        yield lambda: _rewritten(_WATCHED.get() or {})
    finally:
        _WATCHED.reset(token)


def _rewritten(opened: dict[RemotePath, tuple[int, dict[str, str]]]) -> list[tuple[RemotePath, str]]:
    changes = []
    for path, (size, tags) in opened.items():
        path.fs.invalidate_cache(path.path)  # a listing's cached answer would hide the change
        try:
            info = remote_errors(path, lambda: path.fs.info(path.path))  # not `path.info()`: kept from the open
        except StoreError as exc:
            changes.append((path, f"gone while it was read ({exc.strerror})"))
            continue
        now_size, now_tags = int(info.get("size") or 0), _tags(info)
        differing = [tag for tag in tags if tag in now_tags and tags[tag] != now_tags[tag]]  # in `_VERSION_TAGS` order
        if now_size != size or differing:
            was = ", ".join(f"{tag} {tags[tag]}" for tag in differing)
            now = ", ".join(f"{tag} {now_tags[tag]}" for tag in differing)
            changes.append((path, f"rewritten while it was read ({size} bytes{', ' + was if was else ''}; now {now_size} bytes{', ' + now if now else ''})"))
    return changes

WindowKey = tuple[int, str, int, str]
"""A remote file as the window cache tells it apart: filesystem, path, size and version tags."""


class _WindowCache:
    """The last remote windows read, shared by every `RemoteSource`: detection, the zip directory and
    the pickle of one file all read its first and last bytes, which are then fetched once."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._windows: OrderedDict[tuple[WindowKey, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, key: WindowKey, offset: int, size: int) -> bytes | None:
        with self._lock:
            for (file, start), window in reversed(self._windows.items()):
                if file == key and start <= offset and offset + size <= start + len(window):
                    self._windows.move_to_end((file, start))
                    return window[offset - start : offset - start + size]
        return None

    def add(self, key: WindowKey, start: int, window: bytes) -> None:
        with self._lock:
            self._windows[(key, start)] = window
            while len(self._windows) > self._capacity:
                self._windows.popitem(last=False)


_WINDOWS = _WindowCache(capacity=32)
"""At most 4 MiB of windows, whatever the number of files an audit reads."""


def read_range(path: Location, offset: int, size: int, *, item: str) -> bytes:
    """Up to `size` bytes at `offset` of the file at `path` (fewer at its end), in one read;
    `item` names what they are for messages."""
    if isinstance(path, RemotePath):
        end = min(offset + size, path.stat().st_size)
        return bytes(remote_errors(path, lambda: path.fs.cat_file(path.path, start=offset, end=end))) if end > offset else b""
    try:
        with path.open("rb") as handle:
            return os.pread(handle.fileno(), size, offset)
    except OSError as exc:
        raise unreadable(path, exc, item=item) from None
