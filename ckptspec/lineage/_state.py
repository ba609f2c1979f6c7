"""A model's state digest: one value that two checkpoints share exactly when they hold the same
model tensors (the same names, types, shapes and bytes), computed from a manifest's records."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from .._models import TensorInventory

__all__ = ["inventory_digest", "state_digest"]


def state_digest(tensors: Iterable[tuple[str, str, Sequence[int], str | None]]) -> str | None:
    """SHA-256 of one line per tensor in name order, `name NUL dtype NUL shape NUL crc32c`; None
    when a tensor has no CRC32C (a spec that turned tensor checksums off), or there is none."""
    lines = []
    for name, dtype, shape, crc32c in sorted(tensors, key=lambda item: item[0]):
        if crc32c is None:
            return None
        lines.append(f"{name}\0{dtype}\0{','.join(map(str, shape))}\0{crc32c}\n")
    if not lines:
        return None
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def inventory_digest(inventory: TensorInventory | None) -> str | None:
    """The state digest of a manifest's model tensors."""
    if inventory is None:
        return None
    return state_digest((entry.name, str(entry.dtype), entry.shape, entry.crc32c) for entry in inventory.tensors)
