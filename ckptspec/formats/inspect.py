"""Summarise any checkpoint ckptspec reads: `detect` names its kind, the kind's inspector in
`detect.KINDS` reads it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from ._inspection import Inspection
from .detect import KINDS, detect

__all__ = ["inspect_checkpoint"]


def inspect_checkpoint(path: str | Path) -> Inspection:
    """Summarise any checkpoint ckptspec reads, without running pickle and without torch or TF."""
    found = detect(path)
    module, function = KINDS[found.kind].inspector.split(":")
    inspect: Callable[[Path], Inspection] = getattr(importlib.import_module(f".{module}", __package__), function)
    return inspect(found.path)
