"""The fast document path held against pydantic's: what it builds must be what validation builds."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def assert_identical(fast: Any, validated: Any, where: str = "") -> None:
    """Equal values of the same types (`1`, `1.0` and `True` are equal to `==`), and for models the
    same set fields, recursively."""
    assert type(fast) is type(validated), f"{where or '<root>'}: {type(fast).__name__} != {type(validated).__name__}"
    if isinstance(fast, BaseModel):
        assert fast.model_fields_set == validated.model_fields_set, f"{where}: fields set {fast.model_fields_set} != {validated.model_fields_set}"
        assert list(fast.__dict__) == list(validated.__dict__), f"{where}: field order"
        for name in type(fast).model_fields:
            assert_identical(fast.__dict__[name], validated.__dict__[name], f"{where}.{name}")
    elif isinstance(fast, list):
        assert len(fast) == len(validated), f"{where}: lengths {len(fast)} != {len(validated)}"
        for index, (a, b) in enumerate(zip(fast, validated)):
            assert_identical(a, b, f"{where}[{index}]")
    elif isinstance(fast, dict):
        assert list(fast) == list(validated), f"{where}: keys {list(fast)} != {list(validated)}"
        for key in fast:
            assert_identical(fast[key], validated[key], f"{where}[{key!r}]")
    elif isinstance(fast, float) and fast != fast:
        assert validated != validated, f"{where}: nan != {validated!r}"
    else:
        assert fast == validated, f"{where}: {fast!r} != {validated!r}"


def assert_record_matches(record: Any, validated: Any, where: str = "") -> None:
    """A plain record (`ckptspec._plain`) holding, field by field, what the validated model holds."""
    from ckptspec._plain import Record

    if isinstance(record, Record):
        assert isinstance(validated, BaseModel), f"{where or '<root>'}: a record where validation built {type(validated).__name__}"
        assert type(record).__name__ == type(validated).__name__, f"{where}: {type(record).__name__} != {type(validated).__name__}"
        assert record.__slots__ == tuple(type(validated).model_fields), f"{where}: fields"
        for name in record.__slots__:
            assert_record_matches(getattr(record, name), validated.__dict__[name], f"{where}.{name}")
    elif isinstance(record, list):
        assert type(validated) is list and len(record) == len(validated), f"{where}: {record!r} != {validated!r}"
        for index, (a, b) in enumerate(zip(record, validated)):
            assert_record_matches(a, b, f"{where}[{index}]")
    elif isinstance(record, dict):
        assert type(validated) is dict and list(record) == list(validated), f"{where}: keys {list(record)} != {list(validated)}"
        for key in record:
            assert_record_matches(record[key], validated[key], f"{where}[{key!r}]")
    else:
        assert_identical(record, validated, where)


def checked_record(record: Any) -> Any:
    """`record`, each document it builds compared with pydantic's validation of the same data."""

    def checked(kind: str, data: Any) -> Any:
        from ckptspec import _models

        built = record(kind, data)
        if built is not None:
            assert_record_matches(built, getattr(_models, kind).model_validate(data))
        return built

    return checked


def checked_construct(construct: Any) -> Any:
    """`construct`, each document it builds compared with pydantic's validation of the same data."""

    def checked(model: type[BaseModel], data: Any) -> Any:
        built = construct(model, data)
        if built is not None:
            assert_identical(built, model.model_validate(data))
        return built

    return checked
