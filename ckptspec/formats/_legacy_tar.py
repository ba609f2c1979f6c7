"""The pickles of a legacy (torch < 0.4) tar checkpoint's `storages` and `tensors` members, each
judged, with the raw record bytes between them skipped as `torch.load` skips them.
"""

from __future__ import annotations

from ._inspection import GlobalRef
from ._pickle_safety import classify_pickle_stream
from ._pickle_scan import scan_pickle
from ._tensors import DTYPE_ITEMSIZE, STORAGE_DTYPES

__all__ = ["legacy_tar_stream_globals"]


def legacy_tar_stream_globals(data: bytes) -> list[GlobalRef]:
    """The legacy tar format's `storages` or `tensors`: a pickle of the count, then per record a
    pickle of its arguments and the raw bytes `torch.load` reads after it (a storage's length and
    elements, a tensor's sizes and strides), and in `storages` a last pickle of views. Every pickle
    the loader reaches is judged: raw bytes are skipped as the loader skips them, by the type the
    pickle before them names, never beyond the bytes present."""
    named: list[GlobalRef] = []
    cursor = 0
    while cursor < len(data):
        scan = scan_pickle(data, cursor)
        if scan.end is None:
            found, _end = classify_pickle_stream(data, cursor)  # what a pickle stopping half-way named
            named += found
            break
        found, _end = classify_pickle_stream(data[cursor : scan.end])
        named += found
        cursor = _after_raw_record(data, scan.end, {name for _module, name in scan.globals})
        if cursor is None:
            break
    return named


def _after_raw_record(data: bytes, at: int, names: set[str]) -> int | None:
    """Where the next pickle starts after the raw bytes that follow a record's pickle at `at` (the
    pickle named `names`); `at` when no raw bytes follow; None when the loader would stop here."""
    storages = [DTYPE_ITEMSIZE[STORAGE_DTYPES[name]] for name in names if name in STORAGE_DTYPES]
    tensors = [name for name in names if name.endswith("Tensor") and name.removesuffix("Tensor") + "Storage" in STORAGE_DTYPES]
    if storages:
        count = int.from_bytes(data[at : at + 8], "little", signed=True)
        end = at + 8 + count * storages[0]
    elif tensors:
        dimensions = int.from_bytes(data[at : at + 4], "little", signed=True)
        end = at + 8 + 16 * dimensions + 8
    else:
        return at
    return end if at < end <= len(data) else None
