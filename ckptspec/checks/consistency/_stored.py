"""Reading values out of the checkpoint's stored objects and comparing them with the manifest's."""

from __future__ import annotations

import struct
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from ..._exceptions import ReaderError
from ..._pointer import join_pointer, split_pointer
from .._context import Context
from .._registry import Finding, Rule
from ..._views.base import MISSING, CheckpointView, TensorInfo

__all__ = [
    "FIT_LOOP",
    "bundle_key",
    "decoded",
    "equal_at_precision",
    "lookup",
    "plain",
    "scalar_mismatches",
    "variable_owner",
    "variable_pointer",
]

FIT_LOOP = "/loops/fit_loop"

_ATTRIBUTES = "/.ATTRIBUTES/"
_FLOAT_FORMATS = {"float32": "f", "float16": "e"}


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


_COMPARABLE_NODES = 10_000
"""Beyond this many values a stored value is not compared: a manifest records no such thing, and a
pickle can share one list at every level (a "billion laughs") so that expanding it never ends."""


def _is_comparable(value: Any) -> bool:
    """Values the manifest can hold exactly: JSON scalars and lists or mappings of them, each
    container reached once (a pickle's shared references are not something a manifest holds)."""
    pending, seen = [value], set()
    while pending:
        node = pending.pop()
        if node is MISSING or node is None or isinstance(node, (bool, int, float, str)):
            continue
        if not isinstance(node, (list, tuple, Mapping)) or id(node) in seen or len(seen) >= _COMPARABLE_NODES:
            return False
        seen.add(id(node))
        pending.extend(node.values() if isinstance(node, Mapping) else node)
    return True


def decoded(
    ctx: Context, rule: Rule, view: CheckpointView, tensor: TensorInfo, path: tuple[str | int, ...]
) -> Generator[Finding, None, Any]:
    """The value of a one-element tensor, or MISSING after a could-not-check finding for `rule`."""
    if tensor.read_scalar is None:
        reason = f"{tensor.pointer}: the reader cannot decode a {tensor.dtype} tensor of shape {list(tensor.shape)}"
        yield ctx.not_checked(rule, reason, file=view.path, pointer=tensor.pointer, path=path)
        return MISSING
    try:
        return tensor.scalar()
    except ReaderError as exc:
        yield ctx.not_checked(rule, str(exc), file=view.path, pointer=tensor.pointer, path=path)
        return MISSING


def equal_at_precision(recorded: Any, stored: Any, dtype: str) -> bool:
    """Whether `recorded` is `stored` once rounded to the tensor's dtype: a hand-written `0.01` is the
    float32 tensor's 0.009999999776."""
    float_format = _FLOAT_FORMATS.get(dtype)
    if float_format is None or isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return bool(recorded == stored)
    try:
        return bool(struct.unpack(float_format, struct.pack(float_format, recorded))[0] == stored)
    except (OverflowError, struct.error):
        return False


def bundle_key(pointer: str) -> str:
    """The TensorFlow bundle key a pointer into the flat key mapping names."""
    return "/".join(split_pointer(pointer))


def variable_pointer(object_path: str) -> str:
    """The pointer of the value of the variable at `object_path` of a TensorFlow bundle."""
    return join_pointer([object_path + _ATTRIBUTES + "VARIABLE_VALUE"])


def variable_owner(key: str) -> str:
    """The object path of the object holding the variable saved under `key` (`optimizer` for
    `optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE`)."""
    return key.split(_ATTRIBUTES)[0].rpartition("/")[0]
