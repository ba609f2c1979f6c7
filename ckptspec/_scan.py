"""Whole-file digests and byte-range CRC32Cs, computed in one pass over the bytes, written or read.

Reading: `scan` reads a file once, in fixed-size chunks into reused buffers (no new bytes object
per read, nothing mapped, so memory stays flat whatever the file's size), and feeds each chunk to
the CRC32C of every requested byte range it overlaps and to the file digests asked for. When
SHA-256 is asked for, the digests run in a second thread on the buffer just read while the next
one is filled (hashlib and crc32c release the GIL on large buffers): SHA-256 runs at about 1 GB/s
on one core, far below the speed of reading from the page cache. CRC32C alone runs in the reading
thread, and a large file is read in parts at once, a thread each, whose CRC32Cs are then combined
(CRC32C, unlike SHA-256, can be put together from the parts'); the same combining puts the file's
CRC32C together from those of the long ranges, so their bytes go through CRC32C once.

Writing: `DigestWriter` is the file object a serializer writes to; it computes the same digests
from the buffers on their way to the file, so a manifest's digests cost no second pass.

CRC32C is the default file digest of the starter spec: it finds every burst error up to 32 bits
and any other damage but with probability 2^-32, at the speed of reading the bytes. SHA-256 is
for content addresses (registries, signatures); a digest beside the file stops no one who can
rewrite both, so neither replaces a signature.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from ._dataclass import dataclass
from . import _crc32c as crc32c
from ._crc32c import crc32c_combine

from ._storage import location, open_binary

if TYPE_CHECKING:  # imported where threads start: most validations of small files start none
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["ALGORITHMS", "Algorithm", "DigestWriter", "FileDigests", "Scan", "file_digests", "scan"]

Algorithm = Literal["crc32c", "sha256"]
ALGORITHMS: tuple[Algorithm, ...] = ("crc32c", "sha256")
CHUNK_BYTES = 4 << 20
_PARALLEL_BYTES = 1 << 20  # below this, handing a buffer to the other thread costs more than hashing it
_PART_BYTES = 64 << 20
"""The least a thread reads of a file CRC'd in parts: its start and the combining of the parts'
CRC32Cs (about a tenth of a millisecond each) cost under 1 % of reading that much."""
_CARRIED_BYTES = 1 << 20
"""A range at least this long is read through CRC32C once, for itself: stepping the file's CRC32C
over it costs one combination, a few microseconds (tens when its length is new), against about
37 microseconds for each MiB read through CRC32C a second time."""
_MAX_PARTS = 4
"""Reads from the page cache are memory copies: beyond a few threads they contend for the memory's
bandwidth more than they gain, and take cores from other work."""


@dataclass(frozen=True)
class FileDigests:
    """A file's digests as hex strings; None where not computed (or, for a manifest, not recorded)."""

    crc32c: str | None = None
    sha256: str | None = None

    @property
    def algorithms(self) -> tuple[Algorithm, ...]:
        return tuple(name for name in ALGORITHMS if getattr(self, name) is not None)

    def intact(self, read: FileDigests | None) -> bool:
        """Whether these (recorded) digests name at least one algorithm and `read` computed the same
        value for every one: the file's bytes are then those that were written, so the checksums
        stored inside it need not be read again."""
        if read is None or not self.algorithms:
            return False
        return all(getattr(read, name) == getattr(self, name) for name in self.algorithms)


@dataclass(frozen=True)
class Scan:
    """What one pass over a file computed: its digests and the CRC32C of each requested range."""

    size: int
    digests: FileDigests
    range_crc32c: dict[tuple[int, int], int] = field(default_factory=dict)


class _Digests:
    """Running digests fed buffer by buffer. A large buffer is digested on the worker thread while
    the caller reads or writes the next one (crc32c and hashlib release the GIL)."""

    def __init__(self, algorithms: Collection[Algorithm], pool: ThreadPoolExecutor | None) -> None:
        self._crc32c: int | None = 0 if "crc32c" in algorithms else None
        self._sha256 = _sha256() if "sha256" in algorithms else None
        self._pool = pool
        self._pending: Future[None] | None = None

    def update(self, view: memoryview) -> None:
        """Feed `view`; it must stay unchanged until the next `update` or `wait` returns."""
        self.wait()
        if self._pool is not None and view.nbytes >= _PARALLEL_BYTES:
            self._pending = self._pool.submit(self._digest, view)
        else:
            self._digest(view)

    def _digest(self, view: memoryview) -> None:
        if self._sha256 is not None:
            self._sha256.update(view)
        if self._crc32c is not None:
            self._crc32c = crc32c.crc32c(view, self._crc32c)

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def result(self) -> FileDigests:
        self.wait()
        return FileDigests(
            crc32c=f"{self._crc32c:08x}" if self._crc32c is not None else None,
            sha256=self._sha256.hexdigest() if self._sha256 is not None else None,
        )


class _Ranges:
    """CRC32C of byte ranges `[start, end)` of a file, fed with consecutive chunks of it; with
    `file_crc32c`, the CRC32C of every byte fed as well, each byte read through CRC32C once: the
    file's CRC32C steps over a long range by combining the range's instead of reading it again."""

    def __init__(self, ranges: Iterable[tuple[int, int]], *, file_crc32c: bool = False) -> None:
        self._waiting = sorted({(start, end) for start, end in ranges if end > start})
        self._next = 0
        self._active: list[tuple[int, int]] = []
        self.crc32c: dict[tuple[int, int], int] = {span: 0 for span in self._waiting}
        self._file: int | None = 0 if file_crc32c else None
        self._carried = _long_disjoint(self._waiting) if file_crc32c else []
        self._carrying = 0
        """The index in `_carried` of the range the file's CRC32C is at or next reaches."""
        self._skipped = 0
        """The bytes of that range fed so far, which the file's CRC32C has yet to step over."""

    def feed(self, offset: int, view: memoryview) -> None:
        end = offset + view.nbytes
        while self._next < len(self._waiting) and self._waiting[self._next][0] < end:
            self._active.append(self._waiting[self._next])
            self._next += 1
        still_active = []
        for span in self._active:
            low, high = max(span[0], offset), min(span[1], end)
            if low < high:
                self.crc32c[span] = crc32c.crc32c(view[low - offset : high - offset], self.crc32c[span])
            if span[1] > end:
                still_active.append(span)
        self._active = still_active
        if self._file is not None:
            self._feed_file(offset, view)

    def _feed_file(self, offset: int, view: memoryview) -> None:
        """Continue the file's CRC32C over `view` (after `feed` took the ranges' CRC32Cs of it)."""
        end = offset + view.nbytes
        position = offset
        carried = self._carried
        while position < end:
            while self._carrying < len(carried) and carried[self._carrying][1] <= position:
                self._step_over()
                self._carrying += 1
            span = carried[self._carrying] if self._carrying < len(carried) else None
            if span is not None and span[0] <= position:
                stop = min(span[1], end)
                self._skipped += stop - position
            else:
                stop = min(span[0], end) if span is not None else end
                self._file = crc32c.crc32c(view[position - offset : stop - offset], self._file)
            position = stop

    def _step_over(self) -> None:
        if self._skipped:
            span = self._carried[self._carrying]
            self._file = crc32c_combine(self._file, self.crc32c[span], self._skipped)  # type: ignore[arg-type]
            self._skipped = 0

    def file_crc32c(self) -> int:
        """The CRC32C of every byte fed (ranges built with `file_crc32c` only)."""
        assert self._file is not None, "asked of ranges built without file_crc32c"
        if self._carrying < len(self._carried):
            self._step_over()  # the bytes fed ended inside a carried range (a part of the file)
        return self._file

    def spans_to_read(self, size: int) -> list[tuple[int, int]]:
        """The ranges merged where they touch or overlap: what to read when the whole file is not needed."""
        merged: list[tuple[int, int]] = []
        for start, end in self._waiting:
            end = min(end, size)
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            elif start < end:
                merged.append((start, end))
        return merged


def _long_disjoint(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sorted `spans` the file's CRC32C steps over: the long ones, none overlapping another taken."""
    taken: list[tuple[int, int]] = []
    for start, end in spans:
        if end - start >= _CARRIED_BYTES and (not taken or start >= taken[-1][1]):
            taken.append((start, end))
    return taken


def scan(
    path: str | Path, *, algorithms: Collection[Algorithm] = (), crc32c_ranges: Iterable[tuple[int, int]] = ()
) -> Scan:
    """Read `path` once: its digests named in `algorithms` and the CRC32C of each range in
    `crc32c_ranges` (ranges past the end of the file are cut at the end). Only the ranges are read
    when no file digest is asked for. Raises `OSError` as reading does.

    A large file whose only digest is CRC32C is read in consecutive parts at once, one thread each
    (reading and CRC32C release the interpreter lock), and the parts' CRC32Cs are combined."""
    ranges = list(crc32c_ranges)
    parts = _parts(_local_size(path)) if set(algorithms) == {"crc32c"} else []
    if len(parts) < 2:
        return _scan_part(path, algorithms, ranges)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(parts) - 1) as pool:
        later = [pool.submit(_scan_part, path, algorithms, ranges, part) for part in parts[1:]]
        scans = [_scan_part(path, algorithms, ranges, parts[0]), *(future.result() for future in later)]
    return _joined(scans, parts)


def _local_size(path: str | Path) -> int:
    """The size of a file on a local disk; 0 for anything else (read then in one part, which
    reports what is wrong with it)."""
    try:
        return os.stat(path).st_size
    except (OSError, TypeError, ValueError):
        return 0


def _parts(size: int) -> list[tuple[int, int]]:
    """`size` bytes cut into up to one part per core, each a whole number of chunks and at least
    `_PART_BYTES` long."""
    count = max(1, min(os.cpu_count() or 1, _MAX_PARTS, size // _PART_BYTES))
    step = -(-size // count // CHUNK_BYTES) * CHUNK_BYTES
    return [(start, min(start + step, size)) for start in range(0, size, step)] if size else []


def _joined(scans: list[Scan], parts: list[tuple[int, int]]) -> Scan:
    """The scan of the whole file from the scans of its consecutive `parts` (CRC32C only)."""
    file_crc32c = 0
    range_crc32c = dict.fromkeys(scans[0].range_crc32c, 0)
    for scanned, (start, end) in zip(scans, parts):
        file_crc32c = crc32c_combine(file_crc32c, int(str(scanned.digests.crc32c), 16), end - start)
        for (low, high), value in scanned.range_crc32c.items():
            overlap = min(high, end) - max(low, start)
            if overlap > 0:
                range_crc32c[low, high] = crc32c_combine(range_crc32c[low, high], value, overlap)
    return Scan(size=parts[-1][1], digests=FileDigests(crc32c=f"{file_crc32c:08x}"), range_crc32c=range_crc32c)


def _scan_part(
    path: str | Path, algorithms: Collection[Algorithm], crc32c_ranges: list[tuple[int, int]], part: tuple[int, int] | None = None
) -> Scan:
    """`scan` of the whole file, or of the bytes `[start, end)` of `part` alone: its digests and
    ranges' CRC32Cs are then those of the bytes of the part (of each range, the bytes inside it)."""
    # With CRC32C the only file digest, the ranges' pass computes it too, reading each byte once.
    carried = set(algorithms) == {"crc32c"}
    ranges = _Ranges(crc32c_ranges, file_crc32c=carried)
    with open_binary(location(path)) as handle:
        size = handle.seek(0, os.SEEK_END)
        if part is not None:
            spans = [part]
        else:
            spans = [(0, size)] if algorithms else ranges.spans_to_read(size)
        with _worker(algorithms, sum(end - start for start, end in spans)) as pool:
            digests = _Digests(() if carried else algorithms, pool)
            for offset, chunk in _chunks(path, handle, size, spans, 2 if pool is not None else 1):
                digests.update(chunk)
                ranges.feed(offset, chunk)
            result = FileDigests(crc32c=f"{ranges.file_crc32c():08x}") if carried else digests.result()
    return Scan(size=size if part is None else part[1] - part[0], digests=result, range_crc32c=ranges.crc32c)


def _chunks(path: str | Path, handle: IO[bytes], size: int, spans: list[tuple[int, int]], buffers: int) -> Iterator[tuple[int, memoryview]]:
    """The bytes of `spans`, a chunk at a time, with the offset of each. A small local file is
    mapped and sliced, without copying it; any other is read into `buffers` read buffers in turn
    (the worker digests one buffer while the next is read into the other)."""
    mapped = _small_mapping(handle, size)
    if mapped is not None:
        view = memoryview(mapped)  # freed with the last chunk: nothing closes it while one is held
        for start, end in spans:
            if len(view) < end:
                raise OSError(f"{path}: the file ended at byte {len(view)} while being read (it shrank)")
            yield start, view[start:end]
        return
    read_into, turn = _thread_buffers(buffers), 0
    for start, end in spans:
        handle.seek(start)
        offset = start
        while offset < end:
            buffer = read_into[turn][: min(CHUNK_BYTES, end - offset)]
            count = handle.readinto(buffer)  # type: ignore[attr-defined]
            if not count:
                raise OSError(f"{path}: the file ended at byte {offset} while being read (it shrank)")
            yield offset, buffer[:count]
            offset += count
            turn = (turn + 1) % len(read_into)


def _small_mapping(handle: IO[bytes], size: int) -> mmap.mmap | None:
    """A read-only map of a local file that fits one read buffer, or None: reading such a file
    copies it from the page cache for nothing, which costs more than digesting it. A larger one
    is read: a map would hold its pages in this process."""
    if not 0 < size <= CHUNK_BYTES:
        return None
    try:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a local file, or not one a map can hold
        return None


def _sha256() -> Any:
    import hashlib  # OpenSSL's bindings, for the files whose SHA-256 is asked for

    return hashlib.sha256()


def _worker(algorithms: Collection[Algorithm], to_read: int) -> ThreadPoolExecutor | contextlib.nullcontext[None]:
    # CRC32C keeps pace with the reads (about 13 GB/s): a thread for it costs more in its start and
    # in handing each buffer over than it saves. SHA-256 (about 1 GB/s) is worth overlapping with
    # the next read, when there is one: bytes that fit one buffer are read once.
    if "sha256" not in algorithms or to_read <= CHUNK_BYTES:
        return contextlib.nullcontext()
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=1)


_local = threading.local()


def _thread_buffers(count: int) -> list[memoryview]:
    """`count` read buffers of this thread, allocated once: fresh buffers for every file cost more
    in page faults than reading a small checkpoint (an audit reads thousands)."""
    buffers: list[memoryview] = _local.__dict__.setdefault("buffers", [])
    while len(buffers) < count:
        buffers.append(memoryview(bytearray(CHUNK_BYTES)))
    return buffers[:count]


def file_digests(path: str | Path, algorithms: Collection[Algorithm]) -> FileDigests:
    """The digests of `path` named in `algorithms`, in one pass."""
    return scan(path, algorithms=algorithms).digests


class DigestWriter:
    """A binary file object that writes to `handle` and digests every byte on its way there.

    A large buffer is digested in a second thread while it is written; the buffer is only valid
    during the `write` call, so the digests finish before `write` returns.
    """

    def __init__(self, handle: IO[bytes], algorithms: Collection[Algorithm], pool: ThreadPoolExecutor) -> None:
        self._handle = handle
        self._digests = _Digests(algorithms, pool)
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._digests.update(view)
        self._handle.write(view)
        self._digests.wait()
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        self._handle.flush()

    def digests(self) -> FileDigests:
        return self._digests.result()
