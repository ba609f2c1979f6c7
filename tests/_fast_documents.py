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


def checked_construct(construct: Any) -> Any:
    """`construct`, each document it builds compared with pydantic's validation of the same data."""

    def checked(model: type[BaseModel], data: Any) -> Any:
        built = construct(model, data)
        if built is not None:
            assert_identical(built, model.model_validate(data))
        return built

    return checked
