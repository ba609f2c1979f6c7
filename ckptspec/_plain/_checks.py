"""The checks of a document's fields, compiled from the plan (`_plan.py`) without pydantic.

A check takes a value as read and returns the value pydantic would store, or raises `Refused`
when it cannot vouch for it: then pydantic decides. The plan spells each check as a tuple whose
first item names its kind; `compile_models` turns the plan into one check per model, each building
its documents through `make(model_name, values, fields_set)`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = ["SCALAR_TYPES", "Check", "Make", "Refused", "compile_models"]


class Refused(Exception):
    """The plan cannot vouch for a value: pydantic decides."""


Check = Callable[[Any], Any]
Make = Callable[[str, dict[str, Any], set[str]], Any]
"""Builds a model's document from the checked value of every field and the fields the data set."""


class _Field(NamedTuple):
    name: str
    check: Check
    default: Any
    """The data a missing field stands for, checked like a value (pydantic validates defaults too);
    `_REQUIRED` when the field must be given."""


_REQUIRED = object()


def compile_models(plan: Mapping[str, tuple[Any, ...]], make: Make) -> dict[str, Check]:
    """One check per model of `plan`, each building through `make`."""
    checks: dict[str, Check] = {}
    compiled: dict[str, tuple[_Field, ...]] = {}

    def model_check(name: str) -> Check:
        def check(value: Any) -> Any:
            if type(value) is not dict:
                raise Refused
            fields = compiled.get(name)
            if fields is None:
                fields = compiled[name] = tuple(_field(*field, model_check) for field in plan[name])
            if not plan_names[name].issuperset(value):
                raise Refused
            values = {}
            for field_name, field_check, default in fields:
                if field_name in value:
                    values[field_name] = field_check(value[field_name])
                elif default is not _REQUIRED:
                    values[field_name] = field_check(_fresh(default))
                else:
                    raise Refused
            return make(name, values, set(value))

        return check

    plan_names = {name: frozenset(field[0] for field in fields) for name, fields in plan.items()}
    for name in plan:
        checks[name] = model_check(name)
    return checks


def _field(name: str, check: tuple[Any, ...], default: tuple[Any, ...] | None, model_check: Callable[[str], Check]) -> _Field:
    return _Field(name, _check(check, model_check), _REQUIRED if default is None else default[0])


def _fresh(data: Any) -> Any:
    """A copy of a default's data that no document shares."""
    if type(data) is list:
        return [_fresh(item) for item in data]
    if type(data) is dict:
        return {key: _fresh(item) for key, item in data.items()}
    return data


def _check(spelled: tuple[Any, ...], model_check: Callable[[str], Check]) -> Check:
    kind, *arguments = spelled
    if kind == "any":
        return _identity
    if kind == "exact":
        return _exact(_SCALARS[arguments[0]])
    if kind == "float":
        return _float
    if kind == "enum":
        return _member_of(frozenset(arguments[0]))
    if kind == "literal":
        return _literal(arguments[0])
    if kind == "model":
        return model_check(arguments[0])
    if kind == "list":
        return _list(_check(arguments[0], model_check))
    if kind == "dict":
        return _dict(_check(arguments[0], model_check), _check(arguments[1], model_check))
    if kind == "optional":
        return _optional(_check(arguments[0], model_check))
    if kind == "union":
        return _union({_SCALARS[accepts]: _check(member, model_check) for accepts, member in arguments[0]})
    if kind == "constrained":
        return _constrained(_check(arguments[0], model_check), [_constraint(*item) for item in arguments[1]])
    if kind == "validated":
        inner = _check(arguments[0], model_check)
        return _validated(inner, [_function(ref) for ref in arguments[1]], [_function(ref) for ref in arguments[2]])
    raise ValueError(f"unknown check {kind!r} in the document plan")


SCALAR_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "None": type(None)}
"""The JSON scalars by the names the plan spells them with."""
_SCALARS: dict[str, type] = {**SCALAR_TYPES, "list": list}
"""What a member of a union accepts, by name."""


def _identity(value: Any) -> Any:
    return value


def _exact(kind: type) -> Check:
    def exact(value: Any) -> Any:
        if type(value) is not kind:
            raise Refused
        return value

    return exact


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise Refused from None
    raise Refused


def _member_of(values: frozenset[str]) -> Check:
    def member(value: Any) -> Any:
        if type(value) is not str or value not in values:
            raise Refused
        return value  # `use_enum_values`: pydantic stores the member's value, this very string

    return member


def _literal(allowed: tuple[Any, ...]) -> Check:
    pairs = {(type(value), value) for value in allowed}

    def literal(value: Any) -> Any:
        if type(value) not in (str, int, bool) or (type(value), value) not in pairs:
            raise Refused
        return value

    return literal


def _list(item: Check) -> Check:
    def checked_list(value: Any) -> Any:
        if type(value) is not list:
            raise Refused
        return [item(element) for element in value]

    return checked_list


def _dict(key: Check, item: Check) -> Check:
    def checked_dict(value: Any) -> Any:
        if type(value) is not dict:
            raise Refused
        return {key(name): item(element) for name, element in value.items()}

    return checked_dict


def _optional(inner: Check) -> Check:
    return lambda value: None if value is None else inner(value)


def _union(by_type: dict[type, Check]) -> Check:
    """A union whose members each keep exactly one input type as it is (pydantic's smart mode then
    picks that member, unconverted)."""

    def union(value: Any) -> Any:
        check = by_type.get(type(value))
        if check is None:
            raise Refused
        return check(value)

    return union


def _constrained(check: Check, constraints: list[Callable[[Any], bool]]) -> Check:
    def constrained(value: Any) -> Any:
        value = check(value)
        for constraint in constraints:
            if not constraint(value):
                raise Refused
        return value

    return constrained


def _constraint(kind: str, bound: Any) -> Callable[[Any], bool]:
    if kind == "ge":
        return lambda value: value >= bound
    if kind == "gt":
        return lambda value: value > bound
    if kind == "le":
        return lambda value: value <= bound
    if kind == "lt":
        return lambda value: value < bound
    if kind == "min_length":
        return lambda value: len(value) >= bound
    if kind == "max_length":
        return lambda value: len(value) <= bound
    if kind == "pattern":
        pattern = re.compile(bound)
        # pydantic's regular expressions end `$` at the end of the text, Python's also before a final
        # newline: a value with a newline is left to pydantic.
        return lambda value: "\n" not in value and pattern.search(value) is not None
    raise ValueError(f"unknown constraint {kind!r} in the document plan")


def _function(reference: str) -> Callable[[Any], Any]:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _validated(check: Check, before: list[Callable[[Any], Any]], after: list[Callable[[Any], Any]]) -> Check:
    def validated(value: Any) -> Any:
        try:
            for function in before:
                value = function(value)
            value = check(value)
            for function in after:
                value = function(value)
        except Refused:
            raise
        except Exception:
            raise Refused from None
        return value

    return validated
