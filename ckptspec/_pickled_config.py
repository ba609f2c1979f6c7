"""Hyper-parameters as a pickle holds them (stubs of OmegaConf containers, namespaces, torch dtypes),
read into the plain values the adapters record from the live objects, through the same walk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._json_form import JsonForm
from ._views.base import MISSING
from .formats._pickle_safety import Stub
from .formats._pickle_values import PickledNamespace
from .formats._tensors import TorchDType

__all__ = ["hyperparameters_form", "pickled_hyperparameters"]


def pickled_hyperparameters(value: Any) -> Mapping[Any, Any] | None:
    """Saved hyper-parameters as a mapping: a dict, an `argparse.Namespace` or an OmegaConf DictConfig."""
    converted = _unpickled(value)
    return converted if isinstance(converted, Mapping) else None


def _unpickled(value: Any) -> Any:
    """A pickled value as the plain value it stands for: an OmegaConf container as what it holds, a
    namespace as its attributes, a torch dtype by its name (a torch.device is read as its string form,
    `cpu`, as the callback records it)."""
    if isinstance(value, Stub):
        content = _omegaconf_content(value)
        value = value if content is MISSING else content
    if isinstance(value, PickledNamespace):
        return value.attributes
    if isinstance(value, TorchDType):
        return f"torch.{value.name}"
    return value


def _stub_kind(value: Any) -> str | None:
    """What a stub with no JSON form is, by the name its pickle gives it."""
    if isinstance(value, type) and issubclass(value, Stub):
        return f"the class {value.module}.{value.name}"
    if isinstance(value, Stub):
        return f"a {value.qualname}"
    return None


def hyperparameters_form() -> JsonForm:
    """The walk adoption records pickled hyper-parameters by."""
    return JsonForm(_unpickled, _stub_kind)


def _omegaconf_content(stub: Stub) -> Any:
    """What an OmegaConf container or node holds (`_content` / `_val` of its pickled state); `MISSING` otherwise."""
    state = stub.state
    if not stub.qualname.startswith("omegaconf.") or not isinstance(state, Mapping):
        return MISSING
    for key in ("_content", "_val"):
        if key in state:
            return state[key]
    return MISSING
