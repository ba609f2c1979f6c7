"""Reading values out of the checkpoint's stored objects and comparing them with the manifest's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, Rule
from .._view import MISSING, CheckpointView

__all__ = ["FIT_LOOP", "lookup", "plain", "scalar_mismatches"]

FIT_LOOP = "/loops/fit_loop"


def lookup(node: Any, *keys: str | int) -> Any:
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return MISSING
        node = node[key]
    return node


def plain(value: Any) -> Any:
    """A file value in the form the manifest's YAML holds it: tuples as lists, ints kept."""
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    return value


def scalar_mismatches(
    ctx: Context,
    rule: Rule,
    view: CheckpointView,
    recorded: Mapping[str, Any],
    stored: Any,
    *,
    at: str,
    path: tuple[str | int, ...],
) -> Iterator[Finding]:
    """A finding for each value in `recorded` that `stored` (the object at `at`) holds otherwise or
    not at all; stored values the manifest cannot hold exactly (tensors, objects) are not compared."""
    for name, value in recorded.items():
        stored_value = lookup(stored, name)
        if _is_comparable(stored_value) and _differs(value, stored_value):
            shown = "absent" if stored_value is MISSING else repr(plain(stored_value))
            yield ctx.finding(
                rule,
                f"{at}/{name}: {shown} in the file, {value!r} recorded",
                file=view.path,
                pointer=at + join_pointer([name]),
                path=(*path, name),
            )


def _differs(recorded: Any, stored: Any) -> bool:
    if stored is MISSING:
        return True
    stored = plain(stored)
    if isinstance(recorded, bool) or isinstance(stored, bool):
        return recorded is not stored and recorded != stored
    return recorded != stored


def _is_comparable(value: Any) -> bool:
    """Values the manifest can hold exactly: JSON scalars and lists or mappings of them."""
    if value is MISSING or value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_comparable(item) for item in value)
    if isinstance(value, Mapping):
        return all(_is_comparable(item) for item in value.values())
    return False
