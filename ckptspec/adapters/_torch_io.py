"""Writing a checkpoint atomically while its checksums are computed from the bytes on their way to
the disk, not by reading the file or the tensors again afterwards; and the one error for a file
torch.load cannot load."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import torch

from .._atomic import atomic_file
from .._exceptions import CkptspecError, ReaderError
from .._scan import Algorithm, DigestWriter, FileDigests
from .._crc32c import crc32c, crc32c_combine
from ..formats.detect import inspect_checkpoint

__all__ = ["WrittenFile", "load_failure", "save_atomically", "torch_reason"]

_STORAGE_BYTES = 1 << 16
"""Buffers this large are checksummed on their own: torch.save writes each storage in one buffer."""


@dataclass(frozen=True)
class WrittenFile:
    size: int
    digests: FileDigests
    storage_crc32c: Mapping[tuple[int, int], str]
    """CRC32C of each large buffer written, by (address, size): a whole storage's bytes, which the
    manifest's tensor checksums take instead of reading the tensors again (see `crc32c_of_many`)."""


def save_atomically(obj: Any, path: Path, *, algorithms: Collection[Algorithm]) -> WrittenFile:
    """torch.save `obj` to `path`: readers see the old file or the complete new one, never a part.

    Like Lightning's own writer, the data is not fsynced; the swap into place is what makes the file appear whole.
    """
    # Each large buffer is checksummed in a second thread while it is written: on an idle core that
    # costs no time.
    with atomic_file(path, durable=False) as handle, ThreadPoolExecutor(max_workers=2) as pool:
        writer = _ChecksummingWriter(handle, algorithms, pool)
        torch.save(obj, writer)  # type: ignore[arg-type]
    return writer.written()


class _ChecksummingWriter:
    """The file object torch.save writes to. Each byte is CRC32C'd once: a large buffer on its own
    (the file's CRC32C is combined from those), the rest into the file's running CRC32C. Any other
    digest goes through `DigestWriter`."""

    def __init__(self, handle: Any, algorithms: Collection[Algorithm], pool: ThreadPoolExecutor) -> None:
        self._inner = DigestWriter(handle, [name for name in algorithms if name != "crc32c"], pool)
        self._file_crc32c = 0 if "crc32c" in algorithms else None
        self._pool = pool
        self._storages: dict[tuple[int, int], str] = {}

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if view.nbytes < _STORAGE_BYTES:
            if self._file_crc32c is not None:
                self._file_crc32c = crc32c(view, self._file_crc32c)
            return self._inner.write(view)
        pending = self._pool.submit(crc32c, view)
        written = self._inner.write(view)
        value = pending.result()  # before returning: the buffer is only valid during the call
        self._storages[(numpy.frombuffer(view, numpy.uint8).ctypes.data, view.nbytes)] = f"{value:08x}"
        if self._file_crc32c is not None:
            self._file_crc32c = crc32c_combine(self._file_crc32c, value, view.nbytes)
        return written

    def flush(self) -> None:
        self._inner.flush()

    def written(self) -> WrittenFile:
        others = self._inner.digests()
        crc = f"{self._file_crc32c:08x}" if self._file_crc32c is not None else None
        return WrittenFile(size=self._inner.size, digests=FileDigests(crc32c=crc, sha256=others.sha256), storage_crc32c=self._storages)


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
