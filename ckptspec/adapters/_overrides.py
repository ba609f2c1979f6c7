"""The one validation of `overrides` every adapter runs before it loads anything.

Specs name optimizer settings as PyTorch does (`lr`); Keras calls the same setting `learning_rate`.
Either name is accepted everywhere, and each adapter gets the overrides back in its framework's names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .._exceptions import AdapterError
from .._models import Spec

__all__ = ["SETTING_ALIASES", "checked_overrides", "spec_setting_name"]

SETTING_ALIASES: Mapping[str, str] = {"learning_rate": "lr"}
"""A framework's name for an optimizer setting → the name specs use."""


def spec_setting_name(name: str) -> str:
    return SETTING_ALIASES.get(name, name)


def checked_overrides(
    subject: str, overrides: Mapping[str, Any] | None, spec: Spec, settings: Collection[str] | None
) -> dict[str, Any]:
    """`overrides` keyed by the optimizer's own names for its settings, or `AdapterError` naming what is wrong.

    `settings` are the optimizer's setting names (`None` when the restore has no optimizer). An override
    must name one of them, under either alias, and be listed in the spec's `components.optimizer.overridable`.
    """
    if not overrides:
        return {}
    if settings is None:
        raise AdapterError(f"{subject}: overrides {sorted(overrides)} given, but there is no optimizer to apply them to")
    own_name = {spec_setting_name(setting): setting for setting in settings}
    unknown = sorted(name for name in overrides if spec_setting_name(name) not in own_name)
    if unknown:
        raise AdapterError(
            f"{subject}: overrides {unknown} name no setting of the optimizer (its settings: {sorted(settings)})"
        )
    overridable = [spec_setting_name(name) for name in spec.components.optimizer.overridable]
    refused = sorted(name for name in overrides if spec_setting_name(name) not in overridable)
    if refused:
        raise AdapterError(
            f"{subject}: overrides {refused} are not overridable under spec {spec.name!r} "
            f"(components.optimizer.overridable: {spec.components.optimizer.overridable})"
        )
    checked = {own_name[spec_setting_name(name)]: value for name, value in overrides.items()}
    if len(checked) < len(overrides):
        raise AdapterError(f"{subject}: overrides {sorted(overrides)} name the same setting twice")
    return checked
