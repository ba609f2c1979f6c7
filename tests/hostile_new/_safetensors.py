"""Safetensors files written byte by byte, as a hostile uploader would: any header, any metadata."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def shard_name(rank: int, number: int = 1, count: int = 1) -> str:
    """A file name of DCP's Hugging Face layout (`rank` counts from 1 in the name)."""
    return f"shard-{rank:05d}-model-{number:05d}-of-{count:05d}.safetensors"


def write_shard(path: Path, elements: dict[str, int], metadata: dict[str, str] | None) -> Path:
    """One F32 vector of `elements[name]` elements per tensor, with `__metadata__` as given."""
    header: dict[str, object] = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name, count in elements.items():
        header[name] = {"dtype": "F32", "shape": [count], "data_offsets": [offset, offset + 4 * count]}
        offset += 4 * count
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))
    return path


def sharding(offsets: dict[str, list[int]]) -> dict[str, str]:
    """`__metadata__` as DCP writes it: each tensor's `saved_offsets`."""
    return {"DCP_VERSION": "1.0", "DCP_SHARDING_INFO": json.dumps({name: {"saved_offsets": o} for name, o in offsets.items()})}
