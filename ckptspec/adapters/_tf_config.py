"""What a Keras model and optimizer were built with, as JSON scalars that a restore can compare.

Layer paths are positions (`layers.1`, `layers.2.layers.0`), not Keras names: a model rebuilt in the
same process gets fresh auto-names (`dense_3`), while its structure, and so the position, stays.
"""

from __future__ import annotations

import json

from collections.abc import Iterator, Mapping
from fnmatch import fnmatchcase
from typing import Any

import keras
import numpy as np

from .._dataclass import dataclass
from .._models import ModuleConfig
from .._models.common import JSONValue, Scalar

__all__ = [
    "LiveLayer",
    "config_differences",
    "describe_layers",
    "learning_rate_value",
    "optimizer_hyperparameters",
    "qualified_name",
    "schedule_config",
    "variable_names",
]

_UNRECORDED_KEYS = frozenset({"name"})
"""Keys of `get_config()` that differ between identical rebuilds."""


@dataclass(frozen=True)
class LiveLayer:
    path: str
    layer: keras.layers.Layer
    config: ModuleConfig


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_layers(model: keras.layers.Layer) -> list[LiveLayer]:
    """The model and every layer inside it, parents before children, with their recorded constants."""
    return [LiveLayer(path, layer, _module_config(path, layer)) for path, layer in _walk(model, "")]


def _walk(layer: keras.layers.Layer, path: str) -> Iterator[tuple[str, keras.layers.Layer]]:
    yield path, layer
    children = [
        child
        for child in layer._flatten_layers(include_self=False, recursive=False)
        if not isinstance(child, keras.layers.InputLayer)
    ]
    for index, child in enumerate(children):
        yield from _walk(child, f"{path}.layers.{index}" if path else f"layers.{index}")


def _module_config(path: str, layer: keras.layers.Layer) -> ModuleConfig:
    try:
        config = layer.get_config()
    except NotImplementedError:
        config = {}
    constants = {key: value for key, value in _scalar_items(config) if key not in _UNRECORDED_KEYS}
    return ModuleConfig(path=path, type=qualified_name(type(layer)), constants=constants)


def _scalar_items(config: Mapping[str, Any]) -> Iterator[tuple[str, Scalar | list[Scalar]]]:
    for key, value in config.items():
        if _is_dtype_policy(value):
            yield key, value["config"]["name"]
            continue
        scalar = _as_scalar(value)
        if scalar is not _NOT_SCALAR:
            yield key, scalar
        elif isinstance(value, (list, tuple)):
            items = [_as_scalar(item) for item in value]
            if all(item is not _NOT_SCALAR for item in items):
                yield key, items


_NOT_SCALAR = object()


def _as_scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return _NOT_SCALAR


def _is_dtype_policy(value: Any) -> bool:
    return isinstance(value, dict) and value.get("class_name") == "DTypePolicy" and "name" in value.get("config", {})


def config_differences(recorded: list[ModuleConfig], live: list[LiveLayer], ignore: list[str]) -> tuple[list[str], list[str]]:
    """One line per layer constant that differs between the checkpoint and the live model, and one note per
    layer whose class has the same name under another module path (a moved class: compared, not refused)."""
    live_by_path = {entry.path: entry for entry in live}
    recorded_paths = {module.path for module in recorded}
    differences = [
        f"layer {_describe(entry)}: the model has it but the checkpoint does not"
        for entry in live
        if entry.path not in recorded_paths
    ]
    notes = []
    for module in recorded:
        entry = live_by_path.get(module.path)
        if entry is None:
            differences.append(f"layer {module.path} ({_short(module.type)}): in the checkpoint but not in the model")
        elif _short(entry.config.type) != _short(module.type):
            differences.append(f"layer {_describe(entry)}: the checkpoint has a {_short(module.type)} there")
        else:
            if entry.config.type != module.type:
                notes.append(
                    f"layer {_describe(entry)} is a {entry.config.type}, a {module.type} when saved "
                    "(the same class name: taken as the class imported under another module path)"
                )
            differences.extend(_constant_differences(module, entry, ignore))
    return differences, notes


def _constant_differences(module: ModuleConfig, entry: LiveLayer, ignore: list[str]) -> Iterator[str]:
    now = entry.config.constants
    for name in sorted(set(module.constants) | set(now)):
        if any(fnmatchcase(f"{module.path}.{name}", pattern) for pattern in ignore):
            continue
        saved, current = module.constants.get(name, "<absent>"), now.get(name, "<absent>")
        if saved != current:
            yield (
                f"layer {_describe(entry)}: {name} is {current!r} in the model but {saved!r} in the checkpoint; "
                f"to allow it: components.config.ignore: [{json.dumps(f'{module.path}.{name}')}]"
            )


def _describe(entry: LiveLayer) -> str:
    where = entry.path or "(model)"
    return f"{where} ({type(entry.layer).__name__} {entry.layer.name!r})"


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


def variable_names(live: list[LiveLayer]) -> dict[int, str]:
    """`id(variable)` → `<layer path>.<variable name>` for every variable of the model (seed states included)."""
    # A layer's `variables` include its sublayers'; the deepest layer owns one, so name children first.
    names: dict[int, str] = {}
    for entry in reversed(live):
        for variable in entry.layer.variables:
            names.setdefault(id(variable), f"{entry.path}.{variable.name}" if entry.path else variable.name)
    return names


def schedule_config(optimizer: keras.optimizers.Optimizer) -> tuple[str, dict[str, JSONValue]] | None:
    """(type, config) of the optimizer's learning-rate schedule, or None for a constant rate."""
    learning_rate = optimizer.get_config()["learning_rate"]
    if not isinstance(learning_rate, dict):
        return None
    return f"{learning_rate['module']}.{learning_rate['class_name']}", dict(_scalar_items(learning_rate["config"]))


def learning_rate_value(optimizer: keras.optimizers.Optimizer) -> float:
    """The rate the next step would use (a schedule's current value), as the shortest decimal its
    variable's dtype holds: the 0.01 the user wrote, not float32's 0.009999999776482582."""
    value = np.asarray(optimizer.learning_rate)[()]
    return float(np.format_float_positional(value, unique=True))


def optimizer_hyperparameters(optimizer: keras.optimizers.Optimizer) -> dict[str, JSONValue]:
    """The optimizer's scalar settings; `learning_rate` is its current value even under a schedule."""
    settings = {key: value for key, value in _scalar_items(optimizer.get_config()) if key not in _UNRECORDED_KEYS}
    settings["learning_rate"] = learning_rate_value(optimizer)
    return settings
