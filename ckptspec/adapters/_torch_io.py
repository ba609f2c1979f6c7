"""Writing a checkpoint atomically while its file digests are computed from the bytes on their way
to the disk, not by reading the file again afterwards."""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._atomic import atomic_file
from .._scan import Algorithm, DigestWriter, FileDigests

__all__ = ["WrittenFile", "save_atomically"]


@dataclass(frozen=True)
class WrittenFile:
    size: int
    digests: FileDigests


def save_atomically(obj: Any, path: Path, *, algorithms: Collection[Algorithm]) -> WrittenFile:
    """torch.save `obj` to `path`: readers see the old file or the complete new one, never a part.

    Like Lightning's own writer, the data is not fsynced; the rename is what makes the file appear whole.
    """
    with atomic_file(path, durable=False) as handle, ThreadPoolExecutor(max_workers=1) as pool:
        writer = DigestWriter(handle, algorithms, pool)
        torch.save(obj, writer)  # type: ignore[arg-type]
    return WrittenFile(size=writer.size, digests=writer.digests())
