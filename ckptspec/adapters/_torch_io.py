"""Writing a checkpoint atomically while its file digests are computed from the bytes on their way
to the disk, not by reading the file again afterwards; and the one error for a file torch.load
cannot load."""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._atomic import atomic_file
from .._exceptions import CkptspecError, ReaderError
from .._scan import Algorithm, DigestWriter, FileDigests
from ..formats.detect import inspect_checkpoint

__all__ = ["WrittenFile", "load_failure", "save_atomically", "torch_reason"]


@dataclass(frozen=True)
class WrittenFile:
    size: int
    digests: FileDigests


def save_atomically(obj: Any, path: Path, *, algorithms: Collection[Algorithm]) -> WrittenFile:
    """torch.save `obj` to `path`: readers see the old file or the complete new one, never a part.

    Like Lightning's own writer, the data is not fsynced; the swap into place is what makes the file appear whole.
    """
    # The digests run in a second thread on each large buffer while it is written: on an idle core
    # they cost no time, where computing them in the writing thread would add to every save.
    with atomic_file(path, durable=False) as handle, ThreadPoolExecutor(max_workers=1) as pool:
        writer = DigestWriter(handle, algorithms, pool)
        torch.save(obj, writer)  # type: ignore[arg-type]
    return WrittenFile(size=writer.size, digests=writer.digests())


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
