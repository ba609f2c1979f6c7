"""Documents built without pydantic's validation when a plain reading of the models vouches for them.

Building a model's validator costs more than validating a small checkpoint (the models defer it to
their first validation). A document as ckptspec writes it holds only what a short check per field
can vouch for: exact JSON types, literals, enum values, lengths, bounds and patterns. This module
reads those checks off the models into a plan, which `ckptspec._plain` holds as generated source
(`python -m ckptspec._models.construct --write`), so that the validate path checks documents
without importing pydantic at all. `construct` builds the models' own instances by the same plan,
field by field, into the values pydantic would have produced. Anything the plan does not know how
to judge, or judges wrong, is refused, and pydantic validates the document as before: its errors,
and what it accepts, stay pydantic's.
"""

from __future__ import annotations

import functools
import pprint
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .._plain import _plan
from .._plain._checks import SCALAR_TYPES, Check, Refused, compile_models
from .manifest import Manifest
from .spec import Spec

__all__ = ["construct", "document_plan", "json_form", "plan_source"]

DOCUMENTS: tuple[type[BaseModel], ...] = (Spec, Manifest)


def construct(model: type[BaseModel], data: Any) -> BaseModel | None:
    """`model` built from `data` as `model.model_validate(data)` would build it, or None when pydantic must decide."""
    try:
        return _checks()[model.__name__](data)  # type: ignore[no-any-return]
    except Refused:
        return None


@functools.cache
def _checks() -> dict[str, Check]:
    models = _models()
    return compile_models(_plan.PLAN, lambda name, values, fields_set: _instance(models[name], values, fields_set))


@functools.cache
def _models() -> dict[str, type[BaseModel]]:
    """Every model a document holds, by name, the documents' first."""
    found: dict[str, type[BaseModel]] = {}
    pending = list(DOCUMENTS)
    while pending:
        model = pending.pop(0)
        known = found.setdefault(model.__name__, model)
        if known is not model:
            raise _Unsupported(f"two models named {model.__name__}")
        for field in model.model_fields.values():
            pending.extend(inner for inner in _inner_models(field.annotation) if inner.__name__ not in found)
    return found


def _inner_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in _inner_models(argument)]


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


class _Unsupported(Exception):
    """A model or annotation the plan cannot spell: the plan is not written (see `document_plan`)."""


def document_plan() -> dict[str, tuple[Any, ...]]:
    """The checks of every model a document holds, by model name: per field its name, its check
    spelled as data (see `ckptspec._plain._checks`) and the data of its default as a one-item
    tuple, None when the field is required. Raises `_Unsupported` for a model the checks cannot
    vouch for."""
    return {name: _model_plan(model) for name, model in _models().items()}


def _model_plan(model: type[BaseModel]) -> tuple[Any, ...]:
    config = model.model_config
    if config.get("extra") != "forbid" or not config.get("use_enum_values") or not config.get("validate_default"):
        raise _Unsupported(model)
    if model.__pydantic_root_model__ or model.__pydantic_post_init__ or model.__private_attributes__:
        raise _Unsupported(model)  # what `_instance` leaves out
    before, after = _field_validators(model)
    fields = []
    for name, info in model.model_fields.items():
        if info.alias is not None or info.validation_alias is not None:
            raise _Unsupported(name)
        check = _annotated(info.annotation, info.metadata)
        if before.get(name) or after.get(name):
            check = ("validated", check, tuple(before.get(name, [])), tuple(after.get(name, [])))
        fields.append((name, check, _default(info)))
    return tuple(fields)


def _field_validators(model: type[BaseModel]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each field's validators, by the module and name of their function."""
    decorators = model.__pydantic_decorators__
    if any((decorators.validators, decorators.root_validators, decorators.model_validators, decorators.field_serializers,
            decorators.model_serializers, decorators.computed_fields)):  # fmt: skip
        raise _Unsupported(model)
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    for decorator in decorators.field_validators.values():
        function = decorator.func
        # Only a module's own function of the value: the plan names it, and a validator taking
        # pydantic's validation info is left to pydantic.
        plain = isinstance(function, types.FunctionType) and "." not in function.__qualname__ and function.__code__.co_argcount == 1
        if decorator.info.mode not in ("before", "after") or not plain:
            raise _Unsupported(decorator.cls_var_name)
        for name in decorator.info.fields:
            (before if decorator.info.mode == "before" else after).setdefault(name, []).append(f"{function.__module__}:{function.__qualname__}")
    return before, after


def _default(info: Any) -> tuple[Any] | None:
    """The data a missing field stands for, as a one-item tuple; None when the field is required."""
    factory = info.default_factory
    if factory is not None:
        made = factory()
        data = made.model_dump(exclude_unset=True) if isinstance(made, BaseModel) else made
    elif info.default is PydanticUndefined:
        return None
    else:
        data = info.default.value if isinstance(info.default, Enum) else info.default
    if not _is_plain_data(data):
        raise _Unsupported(data)
    return (data,)


def _is_plain_data(data: Any) -> bool:
    if type(data) in (str, int, float, bool, type(None)):
        return True
    if type(data) is list:
        return all(_is_plain_data(item) for item in data)
    return type(data) is dict and all(type(key) is str and _is_plain_data(item) for key, item in data.items())


_SCALARS = {kind: name for name, kind in SCALAR_TYPES.items()}


def _annotation(annotation: Any) -> tuple[Any, ...]:
    """The check of one annotation, from the few kinds the document models use."""
    if annotation is Any:
        return ("any",)
    if annotation is float:
        return ("float",)
    if annotation in _SCALARS:
        return ("exact", _SCALARS[annotation])
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        values = tuple(member.value for member in annotation)
        if not all(type(value) is str for value in values):
            raise _Unsupported(annotation)
        return ("enum", values)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation.__name__)
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _annotated(arguments[0], _flat_metadata(arguments[1:]))
    if origin is Literal:
        if not all(type(value) in (str, int, bool) for value in arguments):
            raise _Unsupported(arguments)
        return ("literal", arguments)
    if origin is list and len(arguments) == 1:
        return ("list", _annotation(arguments[0]))
    if origin is dict and len(arguments) == 2:
        return ("dict", _annotation(arguments[0]), _annotation(arguments[1]))
    if origin in (Union, types.UnionType):
        return _union(arguments)
    raise _Unsupported(annotation)


def _union(members: tuple[Any, ...]) -> tuple[Any, ...]:
    """`X | None` as X or None; any other union only where each input type meets exactly one member
    that keeps it as it is (pydantic's smart mode then picks that member, unconverted)."""
    none = type(None)
    if len(members) == 2 and none in members:
        return ("optional", _annotation(next(member for member in members if member is not none)))
    by_type: dict[str, tuple[Any, ...]] = {}
    for member in members:
        origin = typing.get_origin(member)
        if member in _SCALARS:
            accepts, check = _SCALARS[member], ("any",)
        elif origin is typing.Annotated and typing.get_args(member)[0] in _SCALARS:
            accepts, check = _SCALARS[typing.get_args(member)[0]], _annotation(member)
        elif origin is list:
            accepts, check = "list", _annotation(member)
        else:
            raise _Unsupported(members)
        if accepts in by_type:
            raise _Unsupported(members)
        by_type[accepts] = check
    return ("union", tuple(by_type.items()))


def _flat_metadata(items: tuple[Any, ...]) -> list[Any]:
    """The constraints of `Annotated[T, ...]`: a `Field(...)` there holds its own in `metadata`."""
    flat = []
    for item in items:
        flat.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return flat


def _annotated(annotation: Any, metadata: list[Any]) -> tuple[Any, ...]:
    check = _annotation(annotation)
    constraints = tuple(_constraint(item) for item in metadata)
    return ("constrained", check, constraints) if constraints else check


_BOUNDS = {annotated_types.Ge: "ge", annotated_types.Gt: "gt", annotated_types.Le: "le", annotated_types.Lt: "lt",
           annotated_types.MinLen: "min_length", annotated_types.MaxLen: "max_length"}  # fmt: skip


def _constraint(item: Any) -> tuple[str, Any]:
    kind = _BOUNDS.get(type(item))
    if kind is not None:
        return (kind, getattr(item, kind))
    if type(item).__name__ == "_PydanticGeneralMetadata" and vars(item).keys() == {"pattern"}:
        return ("pattern", item.pattern)
    raise _Unsupported(item)


def plan_source() -> str:
    """The text of `ckptspec/_plain/_plan.py`."""
    lines = [
        '"""Generated from the document models by `python -m ckptspec._models.construct --write`; do not edit.',
        "",
        "Each model's fields: name, check (see `ckptspec._plain._checks`), default data (None: required).",
        '"""',
        "",
        "# fmt: off",
        "PLAN = {",
    ]
    for name, fields in document_plan().items():
        lines.append(f"    {name!r}: (")
        for field in fields:
            text = pprint.pformat(field, width=112).splitlines()
            lines.extend([*(f"        {line}" for line in text[:-1]), f"        {text[-1]},"])
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _main(arguments: list[str]) -> int:
    target = Path(_plan.__file__)
    try:
        source = plan_source()
    except _Unsupported as exc:
        print(f"the plan cannot check what the models hold ({exc}): `_annotation` must learn it", file=sys.stderr)
        return 1
    if arguments == ["--write"]:
        target.write_text(source, encoding="utf-8")
        return 0
    if arguments == ["--check"]:
        current = target.read_text(encoding="utf-8") == source
        print(f"{target}: {'current' if current else 'stale: run python -m ckptspec._models.construct --write'}")
        return 0 if current else 1
    print("usage: python -m ckptspec._models.construct --write | --check", file=sys.stderr)
    return 2


def json_form(model: BaseModel) -> dict[str, Any] | None:
    """`model.model_dump(mode="json")` for a model of plain values, or None when pydantic must dump it."""
    try:
        return _json_model(model)
    except Refused:
        return None


def _json_model(model: BaseModel) -> dict[str, Any]:
    if type(model).__name__ not in _plan.PLAN:
        raise Refused
    held = model.__dict__
    return {name: _json_value(held[name]) for name in type(model).model_fields}


def _json_value(value: Any) -> Any:
    kind = type(value)
    if kind in (str, int, bool, type(None)):
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise Refused  # pydantic writes these as null
        return value
    if kind is list:
        return [_json_value(item) for item in value]
    if kind is dict and all(type(key) is str for key in value):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, BaseModel):
        return _json_model(value)
    raise Refused


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
