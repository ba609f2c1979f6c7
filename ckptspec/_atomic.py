"""Atomic file replacement: readers see the old file or the complete new one, never a part.

The new content goes to a temporary file in the target's directory (so the final rename never
crosses file systems), created like any new file (mode 0o666 less the umask, or the mode of the
file it replaces), and is renamed over the target only once complete. On any failure the temporary
file is removed and the old file is untouched.

The temporary file is created once and handed to the writer open: closing a file that was
truncated on open makes ext4 flush it to disk (its `auto_da_alloc` heuristic), which a create,
close, reopen sequence would pay on every save.

`durable=True` also fsyncs the file and its directory, so the new file survives a power loss. The
adapters pass `durable=False` for manifests: the framework does not fsync the checkpoint either, and
on ext4 an fsync right after a checkpoint save forces the whole checkpoint out to disk with it.

`write_output` is for reports and other outputs a user names: a FIFO, a device or `/dev/null` is
written to as it is, never replaced by a regular file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ._exceptions import WriteError

__all__ = ["atomic_file", "atomic_write_bytes", "write_output"]


@contextlib.contextmanager
def atomic_file(path: str | Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a new temporary file open for writing; on success it replaces `path`."""
    path = Path(path)
    directory = path.parent
    temporary = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_for(path))
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a file in {directory}: {exc.strerror}") from None
    try:
        with open(fd, "wb") as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None
        raise
    if durable:
        with contextlib.suppress(OSError):  # platforms without directory handles
            _fsync_directory(directory)


def atomic_write_bytes(path: str | Path, payload: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `payload` atomically (see the module docstring)."""
    with atomic_file(path, durable=durable) as handle:
        handle.write(payload)


def write_output(path: str | Path, payload: bytes) -> None:
    """Write `payload` to a path the user named: into a special file as it is, else atomically."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if not mode or stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        atomic_write_bytes(path, payload)
        return
    try:
        with open(path, "wb") as handle:
            handle.write(payload)
    except OSError as exc:
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666  # os.open applies the umask


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
