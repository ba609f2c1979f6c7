"""Hyper-parameters as JSON data: the one walk both adoption and the framework adapters record them by.

Adoption reads the values from a pickle (stubs for classes, namespaces as their attributes), an
adapter from live objects (OmegaConf containers, devices, 0-d tensors); each hands in how its own
values unwrap into plain ones and how a value with no JSON form is named. The walk, what is left
out and why, and the bounds against hostile nesting are the same for both, so an adopted manifest
records what the callback would have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ._dataclass import dataclass

__all__ = ["MAX_HYPERPARAMETER_NODES", "JsonForm", "NoJsonForm"]

_MAX_DEPTH = 64
"""Nesting beyond this in hyper-parameters is taken for a hostile file, not a config."""


MAX_HYPERPARAMETER_NODES = 100_000
"""Values recorded from one checkpoint's hyper-parameters at most; a real config holds hundreds."""


@dataclass(frozen=True)
class NoJsonForm:
    """Why a value is left out of the manifest."""

    why: str


class _OutOfValues(Exception):
    """The hyper-parameters hold more values than any config: a hostile file."""


def _as_is(value: Any) -> Any:
    return value


def _unnamed(value: Any) -> str | None:
    return None


class JsonForm:
    """Nested dicts and lists of scalars as JSON data. A part with no JSON form is left out and
    named in `left_out` by its path, never dropped silently; a list or tuple with such an item is
    left out whole. At most `nodes` values are visited: a list shared through a pickle's memo at
    every level (a "billion laughs") costs what is read, never the size of its expansion."""

    def __init__(
        self,
        unwrap: Callable[[Any], Any] = _as_is,
        kind: Callable[[Any], str | None] = _unnamed,
        nodes: int = MAX_HYPERPARAMETER_NODES,
    ) -> None:
        self._unwrap = unwrap
        self._kind = kind
        self.left = nodes
        self.left_out: list[str] = []

    def hyperparameters(self, saved: Mapping[Any, Any], path: str) -> dict[str, Any]:
        """The top level; the entry during which the values run out is left out whole, with the rest."""
        recorded: dict[str, Any] = {}
        for key, item in saved.items():
            named = len(self.left_out)
            try:
                self._keep(recorded, key, self.value(item, f"{path}.{key}", depth=1), path)
            except _OutOfValues:
                del self.left_out[named:]
                too_many = f"more than {MAX_HYPERPARAMETER_NODES} values in all; it and the entries after it are not recorded"
                self.left_out.append(f"{path}.{key}: {too_many}")
                break
        return recorded

    def value(self, value: Any, path: str, depth: int) -> Any:
        """`value` as JSON data, or `NoJsonForm` saying why it has none."""
        if depth > _MAX_DEPTH:
            return NoJsonForm(f"nested deeper than {_MAX_DEPTH} levels, more than any config; not recorded")
        self.left -= 1
        if self.left < 0:
            raise _OutOfValues
        value = self._unwrap(value)
        if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
            return value
        if isinstance(value, Mapping):
            items: dict[str, Any] = {}
            for key, item in value.items():
                self._keep(items, key, self.value(item, f"{path}.{key}", depth + 1), path)
            return items
        if isinstance(value, (list, tuple)):
            return self._sequence(value, path, depth)
        return NoJsonForm(f"{self._kind(value) or _kind(value)}, which has no JSON form")

    def _sequence(self, value: list[Any] | tuple[Any, ...], path: str, depth: int) -> Any:
        items = []
        for index, item in enumerate(value):
            converted = self.value(item, f"{path}[{index}]", depth + 1)
            if isinstance(converted, NoJsonForm):
                return NoJsonForm(f"item {index} is {converted.why}; the whole {type(value).__name__} is left out")
            items.append(converted)
        return items

    def _keep(self, items: dict[str, Any], key: Any, converted: Any, path: str) -> None:
        if isinstance(converted, NoJsonForm):
            self.left_out.append(f"{path}.{key}: {converted.why}")
        else:
            items[str(key)] = converted


def _kind(value: Any) -> str:
    """What a value with no JSON form is, by its class's full name."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    if isinstance(value, float):
        return f"the float {value}"
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace(" builtins.", " ")
