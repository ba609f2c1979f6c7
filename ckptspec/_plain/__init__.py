"""Specs and manifests as plain read-only records, checked and built without pydantic.

`validate` and `audit` read documents that ckptspec itself wrote, and importing pydantic costs more
than judging a small checkpoint. They read each document through `record`: when the plan generated
from the models (`_plan.py`) vouches for the data, the document becomes a `Record` holding exactly
the values the model would hold; otherwise `record` returns None and the caller validates the data
with the model, whose errors and coercions stay pydantic's.

A record answers what the checks ask of a document: its fields as attributes, equality and `repr`
as the model's, and `model_copy(update=...)`. It is not a model: the public API (`load_manifest`,
`load_spec`) still returns the pydantic models.
"""

from __future__ import annotations

import functools
from typing import Any

from . import _plan
from ._checks import Check, Refused, compile_models

__all__ = ["Record", "is_record", "json_form", "record"]


class Record:
    """A document or a part of one, as its model of the same name would hold it."""

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as the models are

    def __repr__(self) -> str:
        held = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({held})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is a record read from a document; it cannot be changed")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_made, (type(self).__name__, {name: getattr(self, name) for name in self.__slots__}))

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Record:
        """A shallow copy with the fields of `update` replaced, as the model's `model_copy` makes."""
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(update or {})
        return _made(type(self).__name__, values)


def _record_class(name: str, fields: tuple[Any, ...]) -> type[Record]:
    names = tuple(field[0] for field in fields)
    return type(name, (Record,), {"__slots__": names, "__match_args__": names, "__module__": __name__})


RECORDS: dict[str, type[Record]] = {name: _record_class(name, fields) for name, fields in _plan.PLAN.items()}
"""The record class of each model, by the model's name."""

_set = object.__setattr__


def _made(name: str, values: dict[str, Any], _fields_set: set[str] | None = None) -> Record:
    """The record of model `name` holding `values` (which fields the data set, a model's concern, is not kept)."""
    made = object.__new__(RECORDS[name])
    for field, value in values.items():
        _set(made, field, value)
    return made


@functools.cache
def _checks() -> dict[str, Check]:
    return compile_models(_plan.PLAN, _made)


def record(kind: str, data: Any) -> Record | None:
    """The document of model `kind` ('Spec', 'Manifest') that `data` holds, or None when the plan
    cannot vouch for it and the model must validate it."""
    try:
        return _checks()[kind](data)  # type: ignore[no-any-return]
    except Refused:
        return None


def is_record(value: object) -> bool:
    return isinstance(value, Record)


def json_form(value: Record) -> dict[str, Any]:
    """What the model's `model_dump(mode="json")` makes of the same document."""
    return {name: _json_value(getattr(value, name)) for name in value.__slots__}


def _json_value(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        return [_json_value(item) for item in value]
    if kind is dict:
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, Record):
        return json_form(value)
    return value
