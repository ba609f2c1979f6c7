"""Construction config: what each module was built with that no state dict holds.

For every module the record keeps its qualified type and two kinds of scalar settings:

- constants, which change what the module computes and so must match on resume: the names in
  `__constants__`, the `name=value` pairs of `extra_repr()`, every public scalar attribute of a
  PyTorch layer (eps, momentum, kernel_size, p, negative_slope, ...), and attributes of the user's
  own modules that carry a layer constant's name;
- attributes: the other public scalar attributes of the user's own modules (learning_rate,
  batch_size, ...). They are hyper-parameters of the run: recorded, and a change is reported, never
  refused.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import field
from fnmatch import fnmatchcase
from typing import Any

import torch

from .._dataclass import dataclass
from .._models import ModuleConfig
from ._overrides import spec_setting_name
from ._torch_tensors import jsonable

__all__ = [
    "ConfigDifferences",
    "config_differences",
    "constant_key",
    "hyperparameter_notes",
    "module_configs",
    "qualified_name",
]

# Mode, not construction: flipped by .train()/.eval() and never part of a model's identity.
_NOT_CONSTANTS = frozenset({"training"})
_LAYER_CONSTANTS = frozenset(
    {
        "eps", "momentum", "affine", "track_running_stats", "elementwise_affine", "normalized_shape",
        "kernel_size", "stride", "padding", "padding_mode", "dilation", "groups", "output_padding",
        "p", "dropout", "negative_slope", "alpha", "beta", "lambd", "threshold", "approximate",
        "min_val", "max_val", "temperature", "scale", "num_heads", "bidirectional", "num_layers", "batch_first",
        "bias", "in_features", "out_features", "in_channels", "out_channels", "num_features", "hidden_size",
    }
)
"""Names that are layer constants even on the user's own modules: they change what is computed."""
_PLAIN_SCALARS = frozenset({bool, int, str})
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
"""What `nn.Module.__init__` sets on every module (its registries and hooks): never a setting."""
_FRAMEWORK_PACKAGES = ("torch.",)
"""Modules whose every public scalar attribute is a construction constant."""


def qualified_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def module_configs(model: torch.nn.Module) -> list[ModuleConfig]:
    return [_module_config(path, module) for path, module in model.named_modules(remove_duplicate=False)]


def _module_config(path: str, module: torch.nn.Module) -> ModuleConfig:
    constants = _extra_repr_keywords(module)
    declared = set(getattr(module, "__constants__", ()))
    layer = type(module).__module__.startswith(_FRAMEWORK_PACKAGES)
    attributes: dict[str, Any] = {}
    for name in declared.union(vars(module).keys() - _MODULE_INTERNALS):
        if name.startswith("_") or name in _NOT_CONSTANTS:
            continue
        value = _scalar_or_scalar_list(getattr(module, name, None))
        if value is None:
            continue
        if layer or name in declared or name in _LAYER_CONSTANTS:
            constants[name] = value
        else:
            attributes[name] = value
    return ModuleConfig(
        path=path,
        type=qualified_name(module),
        constants=dict(sorted(constants.items())),
        attributes=dict(sorted(attributes.items())),
    )


def _scalar_or_scalar_list(value: Any) -> Any:
    if type(value) in _PLAIN_SCALARS:  # most settings: nothing to convert
        return value
    if isinstance(value, torch.Tensor):
        return None
    converted = jsonable(value)
    if isinstance(converted, list) and all(not isinstance(item, (list, dict)) for item in converted):
        return converted
    return converted if isinstance(converted, (bool, int, float, str)) else None


def _extra_repr_keywords(module: torch.nn.Module) -> dict[str, Any]:
    """`name=value` pairs of `extra_repr()` whose values are Python literals (e.g. Linear's `bias=True`)."""
    return {name: list(value) if isinstance(value, tuple) else value for name, value in _literal_keywords(module.extra_repr())}


@functools.lru_cache(maxsize=4096)
def _literal_keywords(text: str) -> tuple[tuple[str, Any], ...]:
    """Parsed once per distinct text: a model repeats the same few layers many times. Lists are
    returned as tuples, so no caller can change what the cache holds."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        return ()
    keywords: list[tuple[str, Any]] = []
    for keyword in getattr(call, "keywords", []):
        try:
            value = _scalar_or_scalar_list(ast.literal_eval(keyword.value))
        except ValueError:
            continue
        if keyword.arg is not None and value is not None:
            keywords.append((keyword.arg, tuple(value) if isinstance(value, list) else value))
    return tuple(keywords)


def constant_key(path: str, name: str) -> str:
    """How a spec's `config.ignore` patterns name a constant: '<module path>.<name>'."""
    return f"{path}.{name}" if path else name


@dataclass(frozen=True)
class ConfigDifferences:
    problems: list[str] = field(default_factory=list)
    """Differences that change what the model computes: the restore is refused."""
    notes: list[str] = field(default_factory=list)
    """Differences reported but not refused: a moved class, a changed hyper-parameter attribute."""


def config_differences(
    saved: Iterable[ModuleConfig],
    current: Iterable[ModuleConfig],
    ignore: Iterable[str],
    overrides: Collection[str] = (),
) -> ConfigDifferences:
    """What differs between the saved config and the current model, one line per module or setting.

    A hyper-parameter attribute named by an override (`learning_rate` for an `lr` override) is
    expected to differ and is left out.
    """
    patterns = list(ignore)
    overridden = {spec_setting_name(name) for name in overrides}
    saved_by_path = {module.path: module for module in saved}
    if not saved_by_path:  # every model has its root module: none recorded means the config was unknown (adopted)
        return ConfigDifferences(notes=["construction constants were not recorded, so not compared"])
    current_by_path = {module.path: module for module in current}
    found = ConfigDifferences()
    for path, before in saved_by_path.items():
        after = current_by_path.get(path)
        label = f"module {path or '<root>'!r}"
        if after is None:
            if not _ignored(path, "*", patterns):
                found.problems.append(
                    f"{label} ({_short(before.type)}) was saved but the model being restored has none{_allow(path, '*')}"
                )
            continue
        if after.type != before.type and not _ignored(path, "type", patterns):
            if _short(after.type) == _short(before.type):
                found.notes.append(
                    f"{label} is a {after.type} in the model being restored, a {before.type} when saved "
                    "(the same class name: taken as the class imported under another module path)"
                )
            else:
                found.problems.append(
                    f"{label} is a {after.type} in the model being restored, a {before.type} when saved{_allow(path, 'type')}"
                )
                continue
        found.problems.extend(_setting_differences(label, before, after, patterns, "constants", set()))
        found.notes.extend(_setting_differences(label, before, after, patterns, "attributes", overridden))
    for path, after in current_by_path.items():
        if path not in saved_by_path and not _ignored(path, "*", patterns):
            found.problems.append(
                f"module {path!r} ({_short(after.type)}) is in the model being restored but was not saved{_allow(path, '*')}"
            )
    return found


def _setting_differences(
    label: str, before: ModuleConfig, after: ModuleConfig, patterns: list[str], kind: str, overridden: set[str]
) -> list[str]:
    saved_settings, current_settings = getattr(before, kind), getattr(after, kind)
    lines = []
    for name in sorted(set(saved_settings) | set(current_settings)):
        if _ignored(before.path, name, patterns) or spec_setting_name(name) in overridden:
            continue
        missing = object()
        saved_value = saved_settings.get(name, missing)
        current_value = current_settings.get(name, missing)
        if saved_value == current_value and type(saved_value) is type(current_value):
            continue
        now = "absent" if current_value is missing else repr(current_value)
        then = "absent" if saved_value is missing else repr(saved_value)
        line = f"{label} ({_short(before.type)}): {name} is {now} in the model being restored, {then} when saved"
        suffix = _allow(before.path, name) if kind == "constants" else " (a hyper-parameter: reported, not refused)"
        lines.append(line + suffix)
    return lines


def hyperparameter_notes(saved: Mapping[str, Any], current: Mapping[str, Any], overrides: Collection[str] = ()) -> list[str]:
    """One note per saved hyper-parameter the run being resumed has another value for (those an override
    names excepted): reported, never refused, as they are the run's settings, not the model's structure."""
    overridden = {spec_setting_name(name) for name in overrides}
    return [
        f"hyperparameters: {name} is {current[name]!r} in the run being resumed, {value!r} when saved (reported, not refused)"
        for name, value in saved.items()
        if name in current and current[name] != value and spec_setting_name(name) not in overridden
    ]


def _allow(path: str, name: str) -> str:
    return f"; to allow it: components.config.ignore: [{json.dumps(constant_key(path, name))}]"


def _ignored(path: str, name: str, patterns: list[str]) -> bool:
    key = constant_key(path, name)
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]
