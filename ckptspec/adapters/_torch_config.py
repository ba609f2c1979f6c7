"""Construction config: what each module was built with that no state dict holds.

For every module the record keeps its qualified type and its constants, gathered generically so
that user modules are covered too: the names in `__constants__`, public attributes whose values
are JSON scalars (or lists of them), and the `name=value` pairs of `extra_repr()`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

import torch

from .._models import ModuleConfig
from ._torch_tensors import jsonable

__all__ = ["config_differences", "constant_key", "module_configs", "qualified_name"]

# Mode, not construction: flipped by .train()/.eval() and never part of a model's identity.
_NOT_CONSTANTS = frozenset({"training"})


def qualified_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def module_configs(model: torch.nn.Module) -> list[ModuleConfig]:
    return [
        ModuleConfig(path=path, type=qualified_name(module), constants=module_constants(module))
        for path, module in model.named_modules(remove_duplicate=False)
    ]


def module_constants(module: torch.nn.Module) -> dict[str, Any]:
    constants = _extra_repr_keywords(module)
    names = [*getattr(module, "__constants__", ()), *vars(module)]
    for name in names:
        if name.startswith("_") or name in _NOT_CONSTANTS or not hasattr(module, name):
            continue
        value = _scalar_or_scalar_list(getattr(module, name))
        if value is not None:
            constants[name] = value
    return dict(sorted(constants.items()))


def _scalar_or_scalar_list(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return None
    converted = jsonable(value)
    if isinstance(converted, list) and all(not isinstance(item, (list, dict)) for item in converted):
        return converted
    return converted if isinstance(converted, (bool, int, float, str)) else None


def _extra_repr_keywords(module: torch.nn.Module) -> dict[str, Any]:
    """`name=value` pairs of `extra_repr()` whose values are Python literals (e.g. Linear's `bias=True`)."""
    try:
        call = ast.parse(f"f({module.extra_repr()})", mode="eval").body
    except SyntaxError:
        return {}
    keywords: dict[str, Any] = {}
    for keyword in getattr(call, "keywords", []):
        try:
            value = _scalar_or_scalar_list(ast.literal_eval(keyword.value))
        except ValueError:
            continue
        if keyword.arg is not None and value is not None:
            keywords[keyword.arg] = value
    return keywords


def constant_key(path: str, name: str) -> str:
    """How a spec's `config.ignore` patterns name a constant: '<module path>.<name>'."""
    return f"{path}.{name}" if path else name


def config_differences(
    saved: Iterable[ModuleConfig], current: Iterable[ModuleConfig], ignore: Iterable[str]
) -> list[str]:
    """One line per module or constant that differs between the saved config and the current model."""
    patterns = list(ignore)
    saved_by_path = {module.path: module for module in saved}
    current_by_path = {module.path: module for module in current}
    lines: list[str] = []
    for path, before in saved_by_path.items():
        after = current_by_path.get(path)
        label = f"module {path or '<root>'!r}"
        if after is None:
            if not _ignored(path, "*", patterns):
                lines.append(f"{label} ({_short(before.type)}) was saved but the model being restored has none")
        elif after.type != before.type:
            if not _ignored(path, "type", patterns):
                lines.append(f"{label} is a {after.type} in the model being restored, a {before.type} when saved")
        else:
            lines.extend(_constant_differences(label, before, after, patterns))
    for path, after in current_by_path.items():
        if path not in saved_by_path and not _ignored(path, "*", patterns):
            lines.append(f"module {path!r} ({_short(after.type)}) is in the model being restored but was not saved")
    return lines


def _constant_differences(label: str, before: ModuleConfig, after: ModuleConfig, patterns: list[str]) -> list[str]:
    lines = []
    kind = _short(before.type)
    for name in sorted(set(before.constants) | set(after.constants)):
        if _ignored(before.path, name, patterns):
            continue
        missing = object()
        saved_value = before.constants.get(name, missing)
        current_value = after.constants.get(name, missing)
        if saved_value == current_value and type(saved_value) is type(current_value):
            continue
        now = "absent" if current_value is missing else repr(current_value)
        then = "absent" if saved_value is missing else repr(saved_value)
        lines.append(f"{label} ({kind}): {name} is {now} in the model being restored, {then} when saved")
    return lines


def _ignored(path: str, name: str, patterns: list[str]) -> bool:
    key = constant_key(path, name)
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]
