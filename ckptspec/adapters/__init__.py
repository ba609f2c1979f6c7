"""Internals of the framework adapters (`ckptspec.torch`, `ckptspec.lightning`, `ckptspec.tensorflow`).

The public entry points are those modules; nothing here is imported by `ckptspec/__init__.py`,
so the core stays importable without any framework installed.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["import_framework"]


def import_framework(*names: str, extra: str) -> ModuleType:
    """The first of `names` that imports; a `ModuleNotFoundError` with the install hint when none does."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # the framework is there but broken: its own error says more than an install hint
            continue
    wanted = " or ".join(repr(name) for name in names)
    raise ModuleNotFoundError(f"this ckptspec adapter needs {wanted}, which is not installed: pip install 'ckptspec[{extra}]'")
