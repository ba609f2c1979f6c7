"""Documents built without pydantic's validation when a plain reading of the models vouches for them.

Building a model's validator costs more than validating a small checkpoint (the models defer it to
their first validation). A document as ckptspec writes it holds only what a short check per field
can vouch for: exact JSON types, literals, enum values, lengths, bounds and patterns. Such a document
is built with `model_construct`, field by field, into the values pydantic would have produced. Anything
this reading does not know how to judge, or judges wrong, is refused, and pydantic validates the
document as before: its errors, and what it accepts, stay pydantic's.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, NamedTuple, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["construct", "json_form"]


class _Refused(Exception):
    """This reading cannot vouch for a value: pydantic decides."""


class _Unsupported(Exception):
    """A model or annotation this reading does not know: its documents always go to pydantic."""


Check = Callable[[Any], Any]
"""A value as read → the value pydantic would store, or `_Refused`."""


class _Field(NamedTuple):
    name: str
    check: Check
    default: Callable[[], Any] | None
    """The value of a missing field before its check (pydantic validates defaults too); None when required."""


def construct(model: type[BaseModel], data: Any) -> BaseModel | None:
    """`model` built from `data` as `model.model_validate(data)` would build it, or None when pydantic must decide."""
    try:
        return _model_check(model)(data)  # type: ignore[no-any-return]
    except _Refused:
        return None


class _Plan(NamedTuple):
    fields: tuple[_Field, ...]
    names: frozenset[str]


@functools.cache
def _planned(model: type[BaseModel]) -> _Plan | None:
    """How to check `model`'s fields, planned at its first document; None for a model left to pydantic."""
    try:
        fields = _plan(model)
    except _Unsupported:
        return None
    return _Plan(fields, frozenset(field.name for field in fields))


def _plan(model: type[BaseModel]) -> tuple[_Field, ...]:
    config = model.model_config
    if config.get("extra") != "forbid" or not config.get("use_enum_values") or not config.get("validate_default"):
        raise _Unsupported(model)
    if model.__pydantic_root_model__ or model.__pydantic_post_init__ or model.__private_attributes__:
        raise _Unsupported(model)  # what `_instance` leaves out
    before, after = _field_validators(model)
    planned = []
    for name, info in model.model_fields.items():
        if info.alias is not None or info.validation_alias is not None:
            raise _Unsupported(name)
        check = _annotated(info.annotation, info.metadata)
        if before.get(name) or after.get(name):
            check = _validated(check, before.get(name, []), after.get(name, []))
        planned.append(_Field(name, check, _default(info)))
    return tuple(planned)


def _field_validators(model: type[BaseModel]) -> tuple[dict[str, list[Check]], dict[str, list[Check]]]:
    decorators = model.__pydantic_decorators__
    if any((decorators.validators, decorators.root_validators, decorators.model_validators, decorators.field_serializers,
            decorators.model_serializers, decorators.computed_fields)):  # fmt: skip
        raise _Unsupported(model)
    before: dict[str, list[Check]] = {}
    after: dict[str, list[Check]] = {}
    for decorator in decorators.field_validators.values():
        function = getattr(model, decorator.cls_var_name)
        # Only `(cls, value)` validators: one taking pydantic's validation info is left to pydantic.
        if decorator.info.mode not in ("before", "after") or function.__func__.__code__.co_argcount != 2:
            raise _Unsupported(decorator.cls_var_name)
        for name in decorator.info.fields:
            (before if decorator.info.mode == "before" else after).setdefault(name, []).append(function)
    return before, after


def _validated(check: Check, before: list[Check], after: list[Check]) -> Check:
    def validated(value: Any) -> Any:
        try:
            for function in before:
                value = function(value)
            value = check(value)
            for function in after:
                value = function(value)
        except _Refused:
            raise
        except Exception:
            raise _Refused from None
        return value

    return validated


def _default(info: Any) -> Callable[[], Any] | None:
    factory = info.default_factory
    if factory is not None:
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return lambda: _model_check(factory)({})
        return factory  # type: ignore[no-any-return]
    if info.default is PydanticUndefined:
        return None
    default = info.default
    if not isinstance(default, (str, int, float, type(None))):
        raise _Unsupported(default)  # pydantic copies a mutable default; none of the models has one
    return lambda: default


def _model_check(model: type[BaseModel]) -> Check:
    plan: _Plan | None = None

    def check(value: Any) -> Any:
        nonlocal plan
        if type(value) is model:  # what a default factory made; pydantic keeps instances as they are
            return value
        if plan is None:
            plan = _planned(model) or _UNPLANNED
        if plan is _UNPLANNED or type(value) is not dict or not plan.names.issuperset(value):
            raise _Refused
        values = {}
        for name, field_check, default in plan.fields:
            if name in value:
                values[name] = field_check(value[name])
            elif default is not None:
                values[name] = field_check(default())
            else:
                raise _Refused
        return _instance(model, values, set(value))

    return check


_UNPLANNED = _Plan((), frozenset())


def _instance(model: type[BaseModel], values: dict[str, Any], fields_set: set[str]) -> BaseModel:
    """What `model.model_construct(_fields_set=fields_set, **values)` makes of values for every field,
    without its search of each field's aliases and defaults: a tenth of the time for a small model."""
    instance = object.__new__(model)
    _set(instance, "__dict__", values)
    _set(instance, "__pydantic_fields_set__", fields_set)
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance


_set = object.__setattr__


_SCALARS = (str, int, float, bool, type(None))


def _annotation(annotation: Any) -> Check:
    """The check of one annotation, from the few kinds the document models use."""
    if annotation is Any:
        return _identity
    if annotation in _SCALARS:
        return _float if annotation is float else _exact(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _enum(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_check(annotation)
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _annotated(arguments[0], _flat_metadata(arguments[1:]))
    if origin is Literal:
        return _literal(arguments)
    if origin is list and len(arguments) == 1:
        return _list(_annotation(arguments[0]))
    if origin is dict and len(arguments) == 2:
        return _dict(_annotation(arguments[0]), _annotation(arguments[1]))
    if origin in (Union, types.UnionType):
        return _union(arguments)
    raise _Unsupported(annotation)


def _identity(value: Any) -> Any:
    return value


def _exact(kind: type) -> Check:
    def exact(value: Any) -> Any:
        if type(value) is not kind:
            raise _Refused
        return value

    return exact


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise _Refused from None
    raise _Refused


def _enum(kind: type[Enum]) -> Check:
    values = {member.value for member in kind}
    if not all(type(value) is str for value in values):
        raise _Unsupported(kind)

    def enum(value: Any) -> Any:
        if type(value) is kind:  # a default given as a member
            return value.value
        if type(value) is not str or value not in values:
            raise _Refused
        return value  # `use_enum_values`: pydantic stores the member's value, this very string

    return enum


def _literal(allowed: tuple[Any, ...]) -> Check:
    if not all(type(value) in (str, int, bool) for value in allowed):
        raise _Unsupported(allowed)
    pairs = {(type(value), value) for value in allowed}

    def literal(value: Any) -> Any:
        if type(value) not in (str, int, bool) or (type(value), value) not in pairs:
            raise _Refused
        return value

    return literal


def _list(item: Check) -> Check:
    def checked_list(value: Any) -> Any:
        if type(value) is not list:
            raise _Refused
        return [item(element) for element in value]

    return checked_list


def _dict(key: Check, item: Check) -> Check:
    def checked_dict(value: Any) -> Any:
        if type(value) is not dict:
            raise _Refused
        return {key(name): item(element) for name, element in value.items()}

    return checked_dict


def _union(members: tuple[Any, ...]) -> Check:
    """`X | None` as X or None; any other union only where each input type meets exactly one member
    that keeps it as it is (pydantic's smart mode then picks that member, unconverted)."""
    none = type(None)
    if len(members) == 2 and none in members:
        inner = _annotation(next(member for member in members if member is not none))
        return lambda value: None if value is None else inner(value)
    by_type: dict[type, Check] = {}
    for member in members:
        origin = typing.get_origin(member)
        if member in _SCALARS:
            accepts, check = member, _identity
        elif origin is typing.Annotated and typing.get_args(member)[0] in _SCALARS:
            accepts, check = typing.get_args(member)[0], _annotation(member)
        elif origin is list:
            accepts, check = list, _annotation(member)
        else:
            raise _Unsupported(members)
        if accepts in by_type:
            raise _Unsupported(members)
        by_type[accepts] = check

    def union(value: Any) -> Any:
        check = by_type.get(type(value))
        if check is None:
            raise _Refused
        return check(value)

    return union


def _flat_metadata(items: tuple[Any, ...]) -> list[Any]:
    """The constraints of `Annotated[T, ...]`: a `Field(...)` there holds its own in `metadata`."""
    flat = []
    for item in items:
        flat.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return flat


def _annotated(annotation: Any, metadata: list[Any]) -> Check:
    check = _annotation(annotation)
    constraints = [_constraint(item) for item in metadata]
    if not constraints:
        return check

    def constrained(value: Any) -> Any:
        value = check(value)
        for constraint in constraints:
            if not constraint(value):
                raise _Refused
        return value

    return constrained


def _constraint(item: Any) -> Callable[[Any], bool]:
    if isinstance(item, annotated_types.Ge):
        return lambda value: value >= item.ge
    if isinstance(item, annotated_types.Gt):
        return lambda value: value > item.gt
    if isinstance(item, annotated_types.Le):
        return lambda value: value <= item.le
    if isinstance(item, annotated_types.Lt):
        return lambda value: value < item.lt
    if isinstance(item, annotated_types.MinLen):
        return lambda value: len(value) >= item.min_length
    if isinstance(item, annotated_types.MaxLen):
        return lambda value: len(value) <= item.max_length
    if type(item).__name__ == "_PydanticGeneralMetadata" and vars(item).keys() == {"pattern"}:
        pattern = re.compile(item.pattern)
        # pydantic's regular expressions end `$` at the end of the text, Python's also before a final
        # newline: a value with a newline is left to pydantic.
        return lambda value: "\n" not in value and pattern.search(value) is not None
    raise _Unsupported(item)


def json_form(model: BaseModel) -> dict[str, Any] | None:
    """`model.model_dump(mode="json")` for a model of plain values, or None when pydantic must dump it."""
    try:
        return _json_model(model)
    except _Refused:
        return None


def _json_model(model: BaseModel) -> dict[str, Any]:
    if _planned(type(model)) is None:
        raise _Refused
    held = model.__dict__
    return {name: _json_value(held[name]) for name in type(model).model_fields}


def _json_value(value: Any) -> Any:
    kind = type(value)
    if kind in (str, int, bool, type(None)):
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _Refused  # pydantic writes these as null
        return value
    if kind is list:
        return [_json_value(item) for item in value]
    if kind is dict and all(type(key) is str for key in value):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, BaseModel):
        return _json_model(value)
    raise _Refused
