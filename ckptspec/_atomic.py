"""Atomic file replacement: readers see the old file or the complete new one, never a part.

The new content goes to a temporary file in the target's directory (so the final rename never
crosses file systems), created like any new file (mode 0o666 less the umask, or the mode of the
file it replaces), and is renamed over the target only once complete. On any failure the temporary
file is removed and the old file is untouched.

`durable=True` also fsyncs the file and its directory, so the new file survives a power loss. The
adapters pass `durable=False` for manifests: the framework does not fsync the checkpoint either, and
on ext4 an fsync right after a checkpoint save forces the whole checkpoint out to disk with it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ._exceptions import WriteError

__all__ = ["atomic_path", "atomic_write_bytes"]


@contextlib.contextmanager
def atomic_path(path: str | Path, *, durable: bool = True) -> Iterator[Path]:
    """Yield a new, empty temporary file to write; on success it replaces `path`."""
    path = Path(path)
    directory = path.parent
    temporary = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_for(path))
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a file in {directory}: {exc.strerror}") from None
    os.close(fd)
    try:
        yield temporary
        if durable:
            _fsync(temporary, os.O_RDONLY)
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None
        raise
    if durable:
        with contextlib.suppress(OSError):  # platforms without directory handles
            _fsync(directory, os.O_RDONLY)


def atomic_write_bytes(path: str | Path, payload: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `payload` atomically (see the module docstring)."""
    with atomic_path(path, durable=durable) as temporary:
        temporary.write_bytes(payload)


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666  # os.open applies the umask


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
