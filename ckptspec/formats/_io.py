"""The one way the readers turn an operating-system error into a `ReaderError`, and the one way they
open a whole small file: only once `stat` says it is a regular file within a size cap (a remote file
is fetched in one request, after its size is checked the same way)."""

from __future__ import annotations

import os
import stat

from .._exceptions import ReaderError, UnsupportedFormatError
from .._filetypes import special_file_kind
from .._storage import Location, RemotePath, remote_errors

__all__ = ["read_bytes", "regular_file_size", "unreadable"]


def unreadable(path: str | Location, error: OSError, *, item: str | None = None) -> ReaderError:
    """`PATH: cannot read: <strerror>`, or `PATH: ITEM: cannot read: ...` for one part of the file."""
    where = f"{path}: {item}" if item is not None else str(path)
    return ReaderError(f"{where}: cannot read: {error.strerror or error}")


def regular_file_size(path: str | Location, limit: int) -> int:
    """The size of the regular file at `path`; a `ReaderError` when it is missing, not a regular file
    (a FIFO or a device is never opened: reading one can block forever or never end), or over `limit`."""
    try:
        status = path.stat() if isinstance(path, RemotePath) else os.stat(path)
    except FileNotFoundError:
        raise ReaderError(f"{path}: no such file") from None
    except OSError as exc:
        raise unreadable(path, exc) from None
    return _checked_size(path, status, limit)


def read_bytes(path: str | Location, limit: int) -> bytes:
    """The whole regular file at `path`, of at most `limit` bytes; see `regular_file_size`."""
    size = regular_file_size(path, limit)
    if isinstance(path, RemotePath):
        return bytes(remote_errors(path, lambda: path.fs.cat_file(path.path, start=0, end=size)))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise unreadable(path, exc) from None
    with os.fdopen(descriptor, "rb") as handle:
        # The path may have been swapped for a FIFO or a larger file since the stat: check what is open.
        size = _checked_size(path, os.fstat(descriptor), limit)
        try:
            return handle.read(size + 1)[:size]
        except OSError as exc:
            raise unreadable(path, exc) from None


def _checked_size(path: str | Location, status: os.stat_result, limit: int) -> int:
    if stat.S_ISDIR(status.st_mode):
        raise ReaderError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(status.st_mode):
        raise UnsupportedFormatError(f"{path}: not a regular file but {special_file_kind(status.st_mode)}; it was not opened")
    if status.st_size > limit:
        raise UnsupportedFormatError(f"{path}: {status.st_size} bytes, larger than the {limit} bytes ckptspec reads of such a file")
    return status.st_size
