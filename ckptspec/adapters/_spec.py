"""Spec handling shared by the framework adapters: which spec applies, and whether it can be met.

Framework-free, so the PyTorch, Lightning and TensorFlow adapters all use the same rules.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._commit import ManifestChoice, manifest_choice
from .._documents import load_spec
from .._sidecars import manifest_path_for
from .._exceptions import AdapterError, RestoreError, RestoreNote
from .._models import Manifest, Requirement, Spec

__all__ = [
    "COMPONENTS",
    "as_spec",
    "effective_spec",
    "find_manifest",
    "has_manifest",
    "raise_if_unmet",
    "requirement",
    "unmet_components",
]

COMPONENTS = ("optimizer", "scheduler", "scaler", "ema", "rng", "data_position", "fingerprint")
"""Components a checkpoint may or may not hold; the model and its config are always there."""


def as_spec(spec: Spec | str | os.PathLike[str] | None) -> Spec | None:
    """A `Spec` as given, or loaded from the YAML file it names."""
    if spec is None or isinstance(spec, Spec):
        return spec
    return load_spec(spec)


def effective_spec(spec: Spec | None, manifest: Manifest) -> Spec:
    """The spec a restore enforces: the one given, else the one the checkpoint was saved against, else one
    that requires every component the checkpoint holds (what was saved must be restored)."""
    if spec is not None:
        return spec
    if manifest.spec is not None and manifest.spec.document is not None:
        return manifest.spec.document
    rules = {
        name: {"require": (Requirement.required if getattr(manifest.components, name) else Requirement.optional).value}
        for name in COMPONENTS
    }
    return Spec.model_validate({"name": f"everything in {manifest.checkpoint}", "components": rules})


def requirement(spec: Spec, component: str) -> Requirement:
    return Requirement(getattr(spec.components, component).require)


def unmet_components(spec: Spec, present: Mapping[str, bool], *, given_as: Mapping[str, str] | None = None) -> list[str]:
    """One line per component of `present` that the spec requires but is absent, or forbids but is there.

    `given_as` names, per component, the argument that supplies it; the line then says what to pass.
    """
    lines = []
    for name, is_present in present.items():
        wanted = requirement(spec, name)
        if wanted is Requirement.required and not is_present:
            hint = f" (pass {given_as[name]}=)" if given_as and name in given_as else ""
            lines.append(f"components.{name} is required, but none was given{hint}")
        elif wanted is Requirement.forbidden and is_present:
            lines.append(f"components.{name} is forbidden, but one is given")
    return lines


def raise_if_unmet(spec: Spec, problems: Sequence[str], *, by: str) -> None:
    """`AdapterError` listing `problems`, the reasons `by` (a save, a manager, a callback) cannot meet `spec`."""
    if problems:
        listed = "".join(f"\n  - {line}" for line in problems)
        raise AdapterError(f"spec {spec.name!r} cannot be met by {by}:{listed}")


def _manifest_choices(checkpoint: Path) -> tuple[ManifestChoice, ManifestChoice]:
    return manifest_choice(checkpoint), manifest_choice(checkpoint.resolve())


def has_manifest(checkpoint: Path) -> bool:
    return any(choice.path.exists() for choice in _manifest_choices(checkpoint))


def find_manifest(checkpoint: Path) -> Path:
    """The manifest beside `checkpoint`, else beside the file a symlinked `checkpoint` points to;
    the pending record of an interrupted save where that is what describes the file (a
    `RestoreNote` says so)."""
    choices = _manifest_choices(checkpoint)
    for choice in choices:
        if choice.path.exists():
            if choice.interrupted is not None:
                warnings.warn(f"{checkpoint}: {choice.interrupted}", RestoreNote, stacklevel=3)
            return choice.path
    interrupted = next((f" ({choice.interrupted})" for choice in choices if choice.interrupted), "")
    raise RestoreError(
        f"{checkpoint}: no manifest beside it ({manifest_path_for(checkpoint).name}){interrupted}; a checkpoint saved "
        f"without ckptspec can be adopted first: ckptspec manifest {checkpoint}"
    )
