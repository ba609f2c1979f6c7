"""`dataclass` as the standard library's, for less than half its cost at import.

On Python 3.11 and 3.12 the standard decorator compiles each method it adds (`__init__`,
`__repr__`, `__eq__`, `__hash__`, and a frozen class's `__setattr__` and `__delattr__`) with an
`exec` of its own: about 0.2 ms a class, 0.4 ms a frozen one, and the classes `validate` imports
made it a fifth of its start-up. This decorator lets the standard one collect the fields (so
`fields`, `replace`, `asdict` and pattern matching work as ever), compiles `__init__` alone, whose
signature is the fields', and gives the class the other methods as closures over its field
names, which behave as the generated ones do. `eq=False` and `slots=True` are covered; a class
with other options (`order`, ...), a dataclass base, or an `__init__`, `__setattr__`,
`__delattr__` or `__slots__` of its own goes to the standard decorator whole.
`tests/unit/test_dataclass.py` holds every class of the package to what the standard decorator
makes of the same fields.

What differs: a class without a docstring gets `Name(field, ...)` rather than the standard
rendering of its `__init__` signature, which takes longer to draw than the class to build; and
its `__dataclass_params__` are those of the field collection (no methods, not frozen).
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

__all__ = ["dataclass"]

T = TypeVar("T", bound=type)


class _Factory:
    """A field's default in `__init__`'s signature when it has a default factory."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@overload
def dataclass(cls: T, /) -> T: ...
@overload
def dataclass(*, frozen: bool = False, eq: bool = True, slots: bool = False, **options: Any) -> Callable[[T], T]: ...
def dataclass(cls: Any = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False, **options: Any) -> Any:
    def wrap(cls: T) -> T:
        own = cls.__dict__
        inherits = any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:])
        if options or inherits or any(name in own for name in ("__init__", "__setattr__", "__delattr__", "__slots__")):
            return dataclasses.dataclass(cls, frozen=frozen, eq=eq, slots=slots, **options)  # type: ignore[no-any-return,call-overload]
        return _compiled(cls, frozen=frozen, eq=eq, slots=slots)

    return wrap if cls is None else wrap(cls)


def _compiled(cls: T, *, frozen: bool, eq: bool, slots: bool) -> T:
    documented = bool(cls.__doc__)
    if not documented:
        cls.__doc__ = cls.__name__  # keeps the standard decorator from drawing the signature
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(field.name for field in fields)})"
    if slots:
        cls = _slotted(cls, tuple(field.name for field in fields), frozen)
    methods = {"__init__": _init(cls, fields, frozen), "__repr__": _repr(tuple(field.name for field in fields if field.repr))}
    if eq:
        methods["__eq__"] = _eq(_getter(field.name for field in fields if field.compare))
    own = cls.__dict__
    for name, method in methods.items():
        if name not in own:
            _install(cls, name, method)
    explicit_hash = own.get("__hash__", dataclasses.MISSING)
    if eq and (explicit_hash is dataclasses.MISSING or (explicit_hash is None and "__eq__" in own)):
        if frozen:
            hashed = _getter(field.name for field in fields if (field.compare if field.hash is None else field.hash))
            _install(cls, "__hash__", lambda self: hash(hashed(self)))
        else:
            cls.__hash__ = None  # type: ignore[assignment]  # equal by value and mutable: unhashable
    if frozen:
        for name, method in _frozen(cls, frozenset(field.name for field in fields)).items():
            _install(cls, name, method)
    return cls


def _slotted(cls: T, names: tuple[str, ...], frozen: bool) -> T:
    """`cls` made again with a slot for each field, as the standard decorator makes it for `slots=True`."""
    inherited = {slot for base in cls.__mro__[1:-1] for slot in _slots_of(base)}
    held = {key: value for key, value in cls.__dict__.items() if key not in (*names, "__dict__", "__weakref__")}
    held["__slots__"] = tuple(name for name in names if name not in inherited)
    slotted: T = type(cls)(cls.__name__, cls.__bases__, held)
    slotted.__qualname__ = cls.__qualname__
    if frozen:  # a slotted instance has no __dict__ for pickle to fill past the frozen __setattr__
        if "__getstate__" not in held:
            slotted.__getstate__ = _state_getter(names)  # type: ignore[attr-defined]
        if "__setstate__" not in held:
            slotted.__setstate__ = _state_setter(names)  # type: ignore[attr-defined]
    return slotted


def _state_getter(names: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    return __getstate__


def _state_setter(names: tuple[str, ...]) -> Callable[[Any, list[Any]], None]:
    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state):
            object.__setattr__(self, name, value)

    return __setstate__


def _slots_of(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool) -> Callable[..., None]:
    """`__init__`, the one method compiled: its signature is the fields'."""
    scope: dict[str, Any] = {"_FACTORY": _FACTORY, "_object": object}
    parameters, body = ["self"], []
    for field in fields:
        name = field.name
        value = name
        if field.default is not dataclasses.MISSING:
            scope[f"_default_{name}"] = field.default
            parameters.append(f"{name}=_default_{name}")
        elif field.default_factory is not dataclasses.MISSING:
            scope[f"_factory_{name}"] = field.default_factory
            parameters.append(f"{name}=_FACTORY")
            value = f"_factory_{name}() if {name} is _FACTORY else {name}"
        else:
            parameters.append(name)
        body.append(f" _object.__setattr__(self, {name!r}, {value})" if frozen else f" self.{name} = {value}")
    exec(f"def __init__({', '.join(parameters)}):\n" + "\n".join(body or [" pass"]), scope)  # built from field names alone
    init: Callable[..., None] = scope["__init__"]
    init.__annotations__ = {**{field.name: field.type for field in fields}, "return": None}
    return init


def _getter(names: Iterable[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of the fields `names` of an instance."""
    held = tuple(names)
    if len(held) == 1:
        single = operator.attrgetter(held[0])
        return lambda instance: (single(instance),)
    return operator.attrgetter(*held) if held else (lambda instance: ())


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in names)})"

    return __repr__


def _eq(compared: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, object], Any]:
    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    return __eq__


def _frozen(cls: type, names: frozenset[str]) -> dict[str, Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return {"__setattr__": __setattr__, "__delattr__": __delattr__}


def _install(cls: type, name: str, method: Callable[..., Any]) -> None:
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)
