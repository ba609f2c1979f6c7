"""A Keras file's own construction config (a `.keras` archive's config.json) and optimizer variables
agree with the manifest."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._context import Context
from .._registry import Finding, declare
from ..._views.base import CheckpointView
from ._optimizer import OptimizerStateCountMismatch

if TYPE_CHECKING:
    from ..._models import Manifest, ModuleConfig

__all__ = ["KerasConfigMismatch", "check_keras"]


@declare("CKS326", "keras-config-mismatch", family="consistency", severity="error")
class KerasConfigMismatch:
    """## What it does
    Compares the layer classes and constants (epsilon, momentum, ...) in a `.keras` archive's
    config.json with the manifest's config. Layers are named by position (`layers.1`,
    `layers.2.layers.0`).

    ## Why is this bad?
    `keras.models.load_model` builds the model from `config.json`: a BatchNormalization whose epsilon
    was changed there normalizes differently with the very same weights, and nothing in the weights
    shows it. A difference means the archive or its manifest was edited after the save.

    ## Example
    The manifest records `layers.1.epsilon: 0.001`; the archive's config.json says `0.01`.

    ## How to fix
    Take the archive from the run that saved it, or rebuild it there and write its manifest again.
    """


def check_keras(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    if view.format != "keras":
        return
    yield from _optimizer_count(ctx, view, manifest)
    config = manifest.components.config
    if view.layers is None or config is None:
        return
    in_file = {layer.path: layer for layer in view.layers}
    for index, module in enumerate(config.modules):
        layer = in_file.get(module.path)
        if layer is not None:
            yield from _differences(ctx, view, module, layer.type, layer.constants, ("components", "config", "modules", index))


def _differences(
    ctx: Context, view: CheckpointView, module: ModuleConfig, file_type: str, constants: dict[str, object], where: tuple[str | int, ...]
) -> Iterator[Finding]:
    label = module.path or "(model)"
    if _short(file_type) != _short(module.type):
        yield ctx.finding(
            KerasConfigMismatch,
            f"config.json: layer {label} is a {_short(file_type)}, the manifest records a {_short(module.type)}",
            file=view.path,
            path=(*where, "type"),
        )
        return
    for name in sorted(set(module.constants) & set(constants)):
        if module.constants[name] != constants[name]:
            yield ctx.finding(
                KerasConfigMismatch,
                f"config.json: layer {label} ({_short(file_type)}): {name} is {constants[name]!r}, "
                f"the manifest records {module.constants[name]!r}",
                file=view.path,
                path=(*where, "constants", name),
            )


def _optimizer_count(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    stored = sum(1 for tensor in view.tensors.values() if tensor.component == "optimizer")
    for index, record in enumerate(manifest.components.optimizer or []):
        if record.state_tensor_count != stored:
            yield ctx.finding(
                OptimizerStateCountMismatch,
                f"{stored} optimizer variables in the file, {record.state_tensor_count} recorded",
                file=view.path,
                path=("components", "optimizer", index, "state_tensor_count"),
            )


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]
