"""What a tensor's CRC32C must be, computed with torch from the whole tensor."""

from __future__ import annotations

import crc32c
import torch


def chunk_crc32c(full: torch.Tensor, chunks: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> str:
    """The CRC32C of `full`'s chunks, each at (offsets, sizes), joined in the order of their offsets."""
    value = 0
    for offsets, sizes in sorted(chunks):
        piece = full[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]
        value = crc32c.crc32c(piece.contiguous().numpy().tobytes(), value)
    return f"{value:08x}"
