"""`ckptspec._dataclass.dataclass` against the standard decorator: every dataclass of the package
behaves as the standard decorator's class of the same fields does."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import pkgutil
from typing import Any

import pytest

import ckptspec
from ckptspec._dataclass import dataclass

OPTIONAL_STACKS = ("torch", "tensorflow", "keras", "lightning", "pytorch_lightning", "transformers", "accelerate", "mlflow", "dask", "fsspec", "s3fs", "model_signing", "plotly", "deepspeed")


def _package_dataclasses() -> list[type]:
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(ckptspec.__path__, "ckptspec."):
        if module.name.endswith("__main__"):
            continue
        try:
            loaded = importlib.import_module(module.name)
        except ImportError as exc:  # a module of an optional stack that is not installed
            assert exc.name is not None and exc.name.split(".")[0] in OPTIONAL_STACKS, exc
            continue
        for value in vars(loaded).values():
            if inspect.isclass(value) and dataclasses.is_dataclass(value) and value.__module__ == loaded.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


@pytest.fixture(scope="module")
def classes() -> list[type]:
    return _package_dataclasses()


def _frozen(cls: type) -> bool:
    return "__setattr__" in vars(cls)


def _standard_twin(cls: type) -> type:
    """The standard decorator's class of the same fields and options."""
    slots, eq = "__slots__" in vars(cls), "__eq__" in vars(cls)
    own_methods = {name: value for name, value in vars(cls).items() if not name.startswith("__") and callable(value)}
    fields = [(field.name, field.type, dataclasses.field(default=field.default, default_factory=field.default_factory,
                                                         repr=field.repr, hash=field.hash, compare=field.compare))
              for field in dataclasses.fields(cls)]  # fmt: skip
    return dataclasses.make_dataclass(cls.__name__, fields, bases=cls.__bases__, frozen=_frozen(cls), eq=eq, slots=slots, namespace={**own_methods, "__qualname__": cls.__qualname__})


def _instance(cls: type, values: dict[str, Any]) -> Any:
    return cls(**values)


def _hash(instance: Any) -> int | str:
    """The hash, or the error hashing raises (a field holding a list or a dict)."""
    try:
        return hash(instance)
    except TypeError as exc:
        return str(exc)


def _made_here(cls: type) -> bool:
    return getattr(cls.__repr__, "__wrapped__", cls.__repr__).__module__ == "ckptspec._dataclass"


def test_the_package_has_its_dataclasses_made_by_the_fast_decorator(classes: list[type]) -> None:
    assert len(classes) > 100 and len([cls for cls in classes if _made_here(cls)]) > 0.9 * len(classes)


def test_every_dataclass_behaves_as_the_standard_one_of_its_fields(classes: list[type]) -> None:
    for cls in filter(_made_here, classes):
        try:
            _assert_behaves_as_standard(cls)
        except Exception as exc:
            raise AssertionError(f"{cls.__module__}.{cls.__qualname__}: {exc!r}") from exc


def _assert_behaves_as_standard(cls: type) -> None:
    twin = _standard_twin(cls)
    assert str(inspect.signature(cls.__init__)) == str(inspect.signature(twin.__init__))
    assert cls.__match_args__ == twin.__match_args__
    assert (cls.__hash__ is None) == (twin.__hash__ is None)
    required = {field.name: f"the {field.name}" for field in dataclasses.fields(cls) if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    ours, theirs = _instance(cls, required), _instance(twin, required)
    assert repr(ours) == repr(theirs)
    assert ("__slots__" in vars(cls)) == ("__slots__" in vars(twin)) and getattr(cls, "__slots__", None) == getattr(twin, "__slots__", None)
    if "__setstate__" not in vars(cls) or "__slots__" in vars(cls):  # a stand-in of a pickled class reads its own state
        assert repr(pickle.loads(pickle.dumps(ours, protocol=pickle.HIGHEST_PROTOCOL))) == repr(ours)
    assert dataclasses.asdict(ours).keys() == dataclasses.asdict(theirs).keys()
    assert (ours == dataclasses.replace(ours)) == (theirs == dataclasses.replace(theirs)) and (ours != ours) is False
    compared = [field.name for field in dataclasses.fields(cls) if field.compare]
    if compared and "__eq__" in vars(cls):
        assert ours != dataclasses.replace(ours, **{compared[0]: object()})
    if twin.__hash__ is not None and "__eq__" in vars(cls):  # a value's hash; without eq, an identity's
        assert _hash(ours) == _hash(dataclasses.replace(ours)) == _hash(theirs)
    if _frozen(cls):
        name = dataclasses.fields(cls)[0].name if dataclasses.fields(cls) else "anything"
        for change in (lambda target: setattr(target, name, 1), lambda target: delattr(target, name)):
            with pytest.raises(dataclasses.FrozenInstanceError) as caught:
                change(ours)
            with pytest.raises(dataclasses.FrozenInstanceError) as expected:
                change(theirs)
            assert str(caught.value) == str(expected.value)


def test_a_class_the_fast_decorator_does_not_cover_is_the_standard_ones() -> None:
    @dataclass(frozen=True, order=True)
    class Ordered:
        a: int

    assert Ordered(1) < Ordered(2) and not _made_here(Ordered)
