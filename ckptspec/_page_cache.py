"""The page cache of a file about to be replaced: the kernel is told it may drop the file's cached
pages once they are on disk (`posix_fadvise(DONTNEED)`), so that writing its replacement does not
pay for reclaiming them (see `ckptspec._atomic`)."""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["drop_cached_pages"]


def drop_cached_pages(path: Path) -> None:
    """Let the kernel drop the page cache of the file about to be replaced; its bytes stay on disk.

    Writing a large file while the one it replaces is still cached makes the writer pay for
    reclaiming those pages: replacing a 1 GiB checkpoint already on disk took 3 s instead of 0.8 s
    (see docs/benchmarks.md). Pages still dirty are left alone: dropping them would first write back
    a file about to be deleted."""
    if not hasattr(os, "posix_fadvise") or not _names_regular_file(path):
        return
    with _regular_file(path) as fd:
        if fd is None:
            return
        try:
            if _on_disk(fd, os.fstat(fd)):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:  # only a hint; the replacement is correct without it
            pass


@contextlib.contextmanager
def _regular_file(path: Path) -> Iterator[int | None]:
    """`path` open for reading if it is a regular file; None for a FIFO, a device, a link someone
    named like one, or nothing at all."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    try:
        yield fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _on_disk(fd: int, status: os.stat_result) -> bool:
    """Whether the open file has no page waiting to be written: the kernel's count where it keeps
    one (`cachestat`, Linux 6.5), else whether it was last written longer ago than the writeback delay."""
    unwritten = _unwritten_pages(fd)
    if unwritten is not None:
        return unwritten == 0
    return time.time() - status.st_mtime > _writeback_delay()


def _unwritten_pages(fd: int) -> int | None:
    """Dirty and writeback pages of the open file, from `cachestat(2)`; None where there is none."""
    call = _cachestat()
    if call is None:
        return None
    import ctypes

    counts = (ctypes.c_uint64 * 5)()  # cached, dirty, writeback, evicted, recently evicted
    whole_file = (ctypes.c_uint64 * 2)(0, 0)
    if call(_CACHESTAT, fd, ctypes.byref(whole_file), ctypes.byref(counts), 0) != 0:
        return None
    return int(counts[1] + counts[2])


_CACHESTAT = 451
"""The `cachestat` system call's number, the same on every architecture (it is newer than 5.x's unification)."""


@functools.cache
def _cachestat() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call  # type: ignore[no-any-return]


@functools.cache
def _writeback_delay() -> float:
    """Seconds after which the kernel has written a file's dirty pages to disk: Linux's expiry age
    and flusher interval (30 s and 5 s unless tuned)."""
    delay = 0.0
    for setting, default in (("dirty_expire_centisecs", 3000), ("dirty_writeback_centisecs", 500)):
        try:
            delay += int(Path("/proc/sys/vm", setting).read_text()) / 100
        except (OSError, ValueError):
            delay += default / 100
    return delay


def _names_regular_file(path: Path) -> bool:
    """Whether `path` itself (not a link's target) is a regular file: no FIFO or device is opened."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
