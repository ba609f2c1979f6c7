"""Read a bare pickle file (`.pkl`, `.pickle`, ...) without running it: which globals it would call.

A bare pickle is not a checkpoint ckptspec validates, but it is what `torch.load` or `pickle.load`
would execute, so `ckptspec inspect` shows every global it names with its safety class, those of
every further pickle that follows the first in the file included. Recognised:
protocols 2-5 by their leading PROTO opcode, and pickles without one (protocol 0/1, which have no
signature) when the whole file parses as exactly one pickle, opcode by opcode, ending at its last
byte, or when the unpickler would call what the file names before it stops (an unquoted STRING, an
unknown opcode, a truncation): then the file is a pickle that stops half-way, and is judged as one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._storage import Location, location
from ._inspection import FileSummary, GlobalRef, Inspection
from ._io import unreadable
from ._pickle_protocol import pickle_protocol
from .torchzip import unpickle_untrusted

__all__ = ["BarePickle", "inspect_pickle", "open_bare_pickle"]


@dataclass(frozen=True)
class BarePickle:
    """What a bare pickle holds, read without running it."""

    path: Path
    size: int
    protocol: int | None
    tree: Any
    globals: list[GlobalRef]


def open_bare_pickle(path: str | Path) -> BarePickle:
    """Read the pickle at `path` with the restricted unpickler: its object tree and every global it names."""
    path = location(path)
    data = _read(path)
    tree, globals_named = unpickle_untrusted(data, str(path))
    return BarePickle(path, len(data), pickle_protocol(data), tree, globals_named)


def inspect_pickle(path: str | Path) -> Inspection:
    """Summarise a bare pickle for `ckptspec inspect`: the globals it names and its protocol.

    It lists no tensors: a tensor `pickle.dump` wrote keeps its bytes inside the pickle, not in a
    record ckptspec can locate.
    """
    from .containers import appended_zip

    bare = open_bare_pickle(path)
    appended = appended_zip(bare.path)  # zipfile opens it whatever comes first: its pickles count too
    return Inspection(
        path=str(bare.path),
        format="pickle",
        files=[FileSummary(str(bare.path), bare.size)],
        tensors=[],
        globals=bare.globals + (appended.globals if appended is not None else []),
        metadata={"pickle_protocol": bare.protocol},
    )


def _read(path: Location) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise unreadable(path, exc) from None


