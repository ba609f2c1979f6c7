"""Writing a checkpoint atomically while its SHA-256 is computed alongside, not after.

The digest runs in a second thread on the same buffers torch hands to `write`, overlapping the
disk write, so a manifest with a whole-file digest costs little more than `torch.save` alone.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from .._atomic import atomic_path

__all__ = ["WrittenFile", "save_atomically"]

_OVERLAP_BYTES = 1 << 20


@dataclass(frozen=True)
class WrittenFile:
    size: int
    sha256: str | None


class _HashingWriter:
    """A file-like object for torch.save: writes to `handle`, hashing each buffer in parallel."""

    def __init__(self, handle: IO[bytes], pool: ThreadPoolExecutor) -> None:
        self._handle = handle
        self._pool = pool
        self._digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if view.nbytes >= _OVERLAP_BYTES:
            # The buffer is only valid during this call, so the hash must finish before returning.
            hashing = self._pool.submit(self._digest.update, view)
            self._handle.write(view)
            hashing.result()
        else:
            self._digest.update(view)
            self._handle.write(view)
        return view.nbytes

    def flush(self) -> None:
        self._handle.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def save_atomically(obj: Any, path: Path, *, digest: bool) -> WrittenFile:
    """torch.save `obj` to `path`: readers see the old file or the complete new one, never a part.

    Like Lightning's own writer, the data is not fsynced; the rename is what makes the file appear whole.
    """
    with atomic_path(path, durable=False) as temporary:
        if digest:
            with temporary.open("wb") as handle, ThreadPoolExecutor(max_workers=1) as pool:
                writer = _HashingWriter(handle, pool)
                torch.save(obj, writer)  # type: ignore[arg-type]
            sha256: str | None = writer.hexdigest()
        else:
            torch.save(obj, temporary)  # torch's own file writer: the fastest path when nothing is hashed
            sha256 = None
        size = temporary.stat().st_size
    return WrittenFile(size=size, sha256=sha256)
