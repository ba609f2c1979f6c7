"""Writing a checkpoint atomically while its checksums are computed from the bytes on their way to
the disk, not by reading the file or the tensors again afterwards, and its storages are written
by a thread of their own while torch.save goes on; and the one error for a file torch.load cannot
load."""

from __future__ import annotations

import errno
import os
import queue
import threading
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy
import torch

from .._dataclass import dataclass
from .._atomic import Staged
from .._interrupts import interrupted, raise_if_interrupted
from .._crc32c import crc32c, crc32c_combine
from .._exceptions import CkptspecError, ReaderError
from .._pool import digest_pool
from .._scan import Algorithm, DigestWriter, FileDigests
from ..formats.inspect import inspect_checkpoint

__all__ = ["WrittenFile", "load_failure", "torch_reason", "write_staged", "write_staged_described"]

T = TypeVar("T")

_STORAGE_BYTES = 1 << 16
"""Buffers this large are checksummed on their own: torch.save writes each storage in one buffer."""


@dataclass(frozen=True)
class WrittenFile:
    size: int
    digests: FileDigests
    storage_crc32c: Mapping[tuple[int, int], str]
    """CRC32C of each large buffer written, by (address, size): a whole storage's bytes, which the
    manifest's tensor checksums take instead of reading the tensors again (see `crc32c_of_many`)."""


def write_staged(obj: Any, staged: Staged, *, algorithms: Collection[Algorithm]) -> WrittenFile:
    """torch.save `obj` into the new file `staged`, not yet in its place: readers still see the old file.

    Like Lightning's own writer, the data is not fsynced unless the save is durable."""
    return write_staged_described(obj, staged, algorithms=algorithms, describe=_nothing)[0]


def write_staged_described(
    obj: Any, staged: Staged, *, algorithms: Collection[Algorithm], describe: Callable[[WrittenFile], T]
) -> tuple[WrittenFile, T]:
    """`write_staged`, with `describe(written)` (the manifest's records) called once torch.save
    has handed over every byte, while the last storages are still being written. Returns once both
    are done; if either fails (or Ctrl-C was pressed), this raises and the file is never swapped in.
    """
    assert staged.handle is not None, "torch.save writes into a staged file, not a staging directory"
    pool = digest_pool()
    # The CRC32Cs of the CPU storages are taken from memory on the pool's threads while torch.save
    # pickles and writes: on an idle core they cost no time, and no write waits for them.
    ahead = {key: pool.submit(crc32c, view) for key, view in _cpu_storages(obj).items()}
    writer = _ChecksummingWriter(staged.handle, algorithms, pool, ahead)
    finished = False
    try:
        torch.save(obj, writer)  # type: ignore[arg-type]
        raise_if_interrupted()  # the writer stopped writing at Ctrl-C: nothing more is worth recording
        written = writer.written()
        description = describe(written)  # while the last storages are still being written
        finished = True
    finally:
        # Always waited for: the write thread must not outlive the file it writes to. Once the save
        # failed, what is not written yet never will be.
        writer.finish(discard=not finished)
    return written, description


def _nothing(written: WrittenFile) -> None:
    return None


_SCALARS = (int, float, str, bytes, type(None))
"""What a state's lists are mostly made of (a parameter group's indices): nothing to look into."""


def _cpu_storages(obj: Any) -> dict[tuple[int, int], memoryview]:
    """The bytes of each large CPU storage under `obj` (through dicts, lists and tuples), by
    (address, size): the buffer torch.save writes for that storage."""
    found: dict[tuple[int, int], memoryview] = {}
    pending = [obj]
    while pending:
        item = pending.pop()
        if isinstance(item, torch.Tensor):
            # A small view of a large storage is left out: the storage's buffer is then checksummed as written.
            if item.layout is torch.strided and item.nbytes >= _STORAGE_BYTES and item.is_cpu:
                _add_storage(item, found)
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(value for value in item if not isinstance(value, _SCALARS))
    return found


def _add_storage(tensor: torch.Tensor, found: dict[tuple[int, int], memoryview]) -> None:
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a storage of their own
        return
    if storage.nbytes() >= _STORAGE_BYTES:
        found[(storage.data_ptr(), storage.nbytes())] = memoryview(torch.empty(0, dtype=torch.uint8).set_(storage).numpy())


class _ChecksummingWriter:
    """The file object torch.save writes to. Each byte is CRC32C'd once: a large buffer on its own
    (taken ahead from memory when it is a CPU storage), the rest into running CRC32Cs between them;
    the file's CRC32C is combined from those at the end. Any other digest goes through `DigestWriter`."""

    def __init__(
        self, handle: Any, algorithms: Collection[Algorithm], pool: ThreadPoolExecutor, ahead: Mapping[tuple[int, int], Future[int]]
    ) -> None:
        others = [name for name in algorithms if name != "crc32c"]
        # Without another digest the writes go to the file through the write thread: torch.save makes
        # several for each tensor, and a pass through DigestWriter costs more than the CRC32C of a small one.
        self._digesting = DigestWriter(handle, others, pool) if others else None
        self._out: _Direct | _WriteBehind
        if self._digesting is not None:
            self._out = _Direct(self._digesting)
        elif hasattr(os, "writev"):
            self._out = _WriteBehind(handle.fileno())
        else:
            self._out = _Direct(handle)
        self._pool = pool
        self._ahead = ahead
        self._buffers: dict[tuple[int, int], Future[int]] = {}
        self._segments: list[tuple[Future[int] | int, int]] = []
        """The file's bytes in order: (CRC32C, length) of each large buffer and of the run of small ones before it."""
        self._run_crc32c = 0
        self._run_length = 0
        self._size = 0
        self._file_crc32c = "crc32c" in algorithms

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        self._size += size
        if interrupted():  # Ctrl-C: torch.save goes on to its end (an error raised here becomes torch's own), writing nothing
            return size
        if size < _STORAGE_BYTES:
            self._run_crc32c = crc32c(view, self._run_crc32c)
            self._run_length += size
            self._out.write(view, lasting=False)
            return size
        key = (numpy.frombuffer(view, numpy.uint8).ctypes.data, size)
        pending = self._ahead.get(key)
        if pending is None:  # a copy torch made (a GPU storage): valid only during this call
            pending = self._pool.submit(crc32c, view)
            self._out.write(view, lasting=False)
            pending.result()
        else:  # a CPU storage: its memory outlives the save
            self._out.write(view, lasting=True)
        self._buffers[key] = pending
        self._segments += [(self._run_crc32c, self._run_length), (pending, size)]
        self._run_crc32c, self._run_length = 0, 0
        return size

    def flush(self) -> None:
        """Nothing to do: the bytes are all in the file once `finish` returns."""

    def finish(self, *, discard: bool = False) -> None:
        """Every byte is in the file (or, with `discard`, no more is written); raises the first
        error writing them. No buffer of the saved object is read after this returns."""
        self._out.finish(discard=discard)

    def written(self) -> WrittenFile:
        sha256 = self._digesting.digests().sha256 if self._digesting is not None else None
        storages = {key: f"{pending.result():08x}" for key, pending in self._buffers.items()}
        return WrittenFile(size=self._size, digests=FileDigests(crc32c=self._file_crc32c_hex(), sha256=sha256), storage_crc32c=storages)

    def _file_crc32c_hex(self) -> str | None:
        if not self._file_crc32c:
            return None
        value = 0
        for part, length in [*self._segments, (self._run_crc32c, self._run_length)]:
            value = crc32c_combine(value, part if isinstance(part, int) else part.result(), length)
        return f"{value:08x}"


class _Direct:
    """Writes each buffer at once."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, view: memoryview, *, lasting: bool) -> None:
        self._out.write(view)

    def finish(self, *, discard: bool) -> None:
        if not discard:
            self._out.flush()


class _WriteBehind:
    """Writes to a file descriptor from a thread of its own, as many buffers per system call as have
    been handed over, while the caller goes on pickling and recording: the thread takes the
    interpreter lock once per call, not once per buffer (it would wait up to the 5 ms switch
    interval each time). A lasting buffer (a CPU storage) is queued as it is; small ones are copied
    into one array until the next large one (or 1 MiB); a large one valid only during the call
    (torch's copy of a GPU storage) is written before `write` returns."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[memoryview | bytearray | threading.Event | None] = queue.SimpleQueue()
        self._room = threading.Semaphore(_SMALL_ARRAYS)
        self._error: BaseException | None = None
        self._discard = False
        self._small = bytearray()
        self._thread = threading.Thread(target=self._run, name="ckptspec-write", daemon=True)
        self._thread.start()

    def write(self, view: memoryview, *, lasting: bool) -> None:
        # A failed write is raised by `finish`, not here: raised from a later write inside
        # torch.save, it came out as torch's own error about the file's position instead.
        if not lasting and view.nbytes < _STORAGE_BYTES:
            self._small += view  # torch's headers and small records, between two storages
            if len(self._small) >= _SMALL_BYTES:  # a model of small tensors only: memory stays bounded
                self._hand_over_small()
            return
        self._hand_over_small()
        if lasting:
            self._queue.put(view)
            return
        written = threading.Event()
        self._queue.put(view)
        self._queue.put(written)
        _uninterrupted(written.wait)  # torch frees the buffer once this returns

    def finish(self, *, discard: bool) -> None:
        self._discard = discard
        self._hand_over_small()
        self._queue.put(None)
        _uninterrupted(self._thread.join)  # the file is closed, and the saved object may go, after this
        if self._error is not None and not discard:
            raise self._error

    def _hand_over_small(self) -> None:
        if self._small:
            self._room.acquire()  # waits while the write thread is that far behind
            self._queue.put(self._small)  # never changed again: the next ones go to a new array
            self._small = bytearray()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < _IOV_MAX and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                if self._error is None and not self._discard:
                    _write_all(self._fd, [item for item in batch if isinstance(item, (memoryview, bytearray))])
            except Exception as exc:  # raised in the saving thread by `finish`
                self._error = exc
            finally:
                for item in batch:
                    if isinstance(item, threading.Event):
                        item.set()
                    elif isinstance(item, bytearray):
                        self._room.release()
            if batch[-1] is None:
                return


def _uninterrupted(wait: Callable[[], object]) -> None:
    """`wait()` to the end, even through a KeyboardInterrupt, raised once it has returned: the write
    thread must never be left reading memory or writing to a descriptor that is about to be freed."""
    interrupted: BaseException | None = None
    while True:
        try:
            wait()
            break
        except BaseException as exc:  # a signal's exception, raised after the wait
            interrupted = exc
    if interrupted is not None:
        raise interrupted


_SMALL_BYTES = 1 << 20
"""Small writes are copied into arrays of about this size before they are handed to the write thread."""
_SMALL_ARRAYS = 8
"""Arrays of small writes handed over and not yet written, at most: the copies stay within 8 MiB."""
_IOV_MAX = 1024
"""Buffers one `writev` takes at most (POSIX requires at least 16; Linux and macOS take 1024)."""


def _write_all(fd: int, buffers: list[memoryview | bytearray]) -> None:
    views = [view for view in map(memoryview, buffers) if view.nbytes]
    first = 0
    while first < len(views):
        written = os.writev(fd, views[first:])
        if not written:
            raise OSError(errno.EIO, "the file took none of the bytes written to it")
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if written:
            views[first] = views[first][written:]


def load_failure(path: Path, error: Exception) -> CkptspecError:
    """The error for `path` when torch.load raised `error` on it: what ckptspec's own reader finds
    wrong with the file (not a checkpoint, truncated, a damaged record...), else torch's reason; both
    name the file."""
    try:
        inspect_checkpoint(path)
    except CkptspecError as found:
        return found
    return ReaderError(f"{path}: torch.load cannot load it: {torch_reason(error)}")


def torch_reason(error: Exception) -> str:
    """The line of torch's message that says what is wrong (its messages run to several lines of advice)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines if "Unsupported global" in line), lines[0] if lines else "")
    return f"{type(error).__name__}: {reason}" if reason else type(error).__name__
