"""A Lightning checkpoint's hyper-parameters match the ones the manifest's config records."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from .._context import Context
from .._registry import Finding, declare
from ..._views.base import CheckpointView
from ._stored import scalar_mismatches

if TYPE_CHECKING:
    from ..._models import Manifest

__all__ = ["HyperparameterMismatch", "check_hyperparameters"]


@declare("CKS317", "hyperparameter-mismatch", family="consistency", severity="error")
class HyperparameterMismatch:
    """## What it does
    Checks the hyper-parameters the manifest's config records against a Lightning checkpoint's
    `hyper_parameters`.

    ## Why is this bad?
    `load_from_checkpoint` builds the model from the saved hyper-parameters; a difference from the
    manifest means the checkpoint or its manifest was edited.

    ## Example
    The manifest records `hidden: 64`; the file's `hyper_parameters.hidden` is `32`.

    ## How to fix
    Write the manifest again from the run that saved the file.
    """


def check_hyperparameters(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    config = manifest.components.config
    stored = view.resolve("/hyper_parameters")
    if config is None or view.format != "lightning" or not isinstance(stored, Mapping):
        return
    yield from scalar_mismatches(
        ctx,
        HyperparameterMismatch,
        view,
        config.hyperparameters,
        stored,
        at="/hyper_parameters",
        path=("components", "config", "hyperparameters"),
    )
