"""Whether bytes are a pickle, and of which protocol, from its opcodes alone: what `detect` asks of
a file before any reader runs. Nothing is unpickled."""

from __future__ import annotations

import os
import pickle
import pickletools
import struct
from pathlib import Path

from .._storage import Location, RemotePath
from ._io import unreadable
from ._pickle_stack import walk_stack

__all__ = ["TEXT_PICKLE_LIMIT", "pickle_protocol", "sniff_pickle_protocol"]


TEXT_PICKLE_LIMIT = 64 << 20
"""Larger files without a PROTO opcode are not parsed to find out whether they are pickles."""


_PROTO_PROTOCOLS = range(2, pickle.HIGHEST_PROTOCOL + 1)


def sniff_pickle_protocol(path: Path, head: bytes) -> int | None:
    """The protocol of the bare pickle at `path` (whose first bytes are `head`), or None if it is not one."""
    if head[:1] == pickle.PROTO:
        return pickle_protocol(head)
    data = _read_unless_larger(path, TEXT_PICKLE_LIMIT)
    return None if data is None else pickle_protocol(data)


def pickle_protocol(data: bytes) -> int | None:
    """The protocol `data` is pickled with, or None if it is not a pickle.

    With a PROTO opcode only the first two bytes are looked at; without one, `data` must be one
    complete pickle, and its protocol is the highest any of its opcodes needs.
    """
    if data[:1] == pickle.PROTO:
        return data[1] if len(data) > 1 and data[1] in _PROTO_PROTOCOLS else None
    return _complete_pickle_protocol(data)


def _complete_pickle_protocol(data: bytes) -> int | None:
    highest, count, stop_at = 0, 0, None
    try:
        for opcode, _argument, position in pickletools.genops(data):
            highest, count = max(highest, opcode.proto), count + 1
            if opcode.name == "STOP":
                stop_at = position
    except (ValueError, struct.error, OverflowError):
        return _stopping_pickle_protocol(data, highest)
    if count > 1 and stop_at == len(data) - 1:
        return highest
    return _stopping_pickle_protocol(data, highest) if count > 1 and stop_at is not None else None


def _stopping_pickle_protocol(data: bytes, highest: int) -> int | None:
    """The protocol of a pickle without PROTO that stops before its end, where the unpickler would
    call a global it names on the way (prose that opens like an opcode never does); else None."""
    walk = walk_stack(data)
    if walk.calls > 0 and walk.globals_named > 0:
        return highest
    return highest if walk.complete and _opens_with_legacy_magic(data) else None


_LEGACY_TORCH_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
"""The number a legacy `torch.save` stream pickles first, whatever the protocol it was told to use."""


def _opens_with_legacy_magic(data: bytes) -> bool:
    for opcode, argument, _position in pickletools.genops(data):
        if opcode.name not in ("PROTO", "FRAME"):
            return argument == _LEGACY_TORCH_MAGIC_NUMBER
    return False


def _read_unless_larger(path: Location, limit: int) -> bytes | None:
    if isinstance(path, RemotePath):
        return path.read_bytes() if path.stat().st_size <= limit else None
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size > limit:
                return None
            return handle.read()
    except OSError as exc:
        raise unreadable(path, exc) from None
