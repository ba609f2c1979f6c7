"""Internals of the framework adapters (`ckptspec.torch`, `ckptspec.lightning`, `ckptspec.tensorflow`).

The public entry points are those modules; nothing here is imported by `ckptspec/__init__.py`,
so the core stays importable without any framework installed.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["import_framework", "import_installed_frameworks"]


def import_framework(*names: str, extra: str) -> ModuleType:
    """The first of `names` that imports; a `ModuleNotFoundError` with the install hint when none does."""
    for name in names:
        module = _import_if_installed(name)
        if module is not None:
            return module
    raise _not_installed(names, extra)


def import_installed_frameworks(*names: str, extra: str) -> tuple[ModuleType, ...]:
    """Every one of `names` that is installed, in that order; a `ModuleNotFoundError` with the install hint when none is."""
    modules = tuple(module for module in map(_import_if_installed, names) if module is not None)
    if not modules:
        raise _not_installed(names, extra)
    return modules


def _import_if_installed(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise  # the framework is there but broken: its own error says more than an install hint
        return None


def _not_installed(names: tuple[str, ...], extra: str) -> ModuleNotFoundError:
    wanted = " or ".join(repr(name) for name in names)
    return ModuleNotFoundError(f"this ckptspec adapter needs {wanted}, which is not installed: pip install 'ckptspec[{extra}]'")
