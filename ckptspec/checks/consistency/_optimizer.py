"""The optimizer in the file matches the one the manifest records, and its parameter map matches the model."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, declare
from ..._views.base import MISSING, CheckpointView, TensorInfo
from ._stored import bundle_key, decoded, equal_at_precision, lookup, plain, scalar_mismatches, variable_owner

if TYPE_CHECKING:
    from ..._models import Manifest, OptimizerRecord, ParamGroupRecord, TensorInventory

__all__ = [
    "OptimizerHyperparameterMismatch",
    "OptimizerParamGroupsMismatch",
    "OptimizerStateCountMismatch",
    "OptimizerStateShapeMismatch",
    "ParamMapMismatch",
    "ParameterNotOptimized",
    "check_optimizer",
    "check_param_map",
]

# State entries that have their parameter's shape in every torch optimizer that keeps them.
_PARAMETER_SHAPED_STATE = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "acc_delta", "sum", "grad_avg"}

# The hyperparameters a TensorFlow optimizer keeps as variables, by the reader's role of the variable.
_TF_HYPERPARAMETER_OF_ROLE = {"learning_rate": "learning_rate", "optimizer_iterations": "iterations"}


@declare("CKS304", "optimizer-hyperparameter-mismatch", family="consistency", severity="error")
class OptimizerHyperparameterMismatch:
    """## What it does
    Checks that each optimizer param group in the file has the hyperparameters the manifest records
    (lr, betas, eps, weight_decay, momentum, ...). A TensorFlow bundle holds only those the optimizer
    keeps as variables: a constant `learning_rate` and `iterations`.

    ## Why is this bad?
    `optimizer.load_state_dict` restores the saved param groups over the ones the code configured;
    a checkpoint whose hyperparameters differ from its manifest trains differently than recorded.

    ## Example
    The manifest records `eps: 1.0e-08`, the file's `optimizer_states[0].param_groups[0].eps` is `1.0e-06`.

    ## How to fix
    Find which of the two was edited; write the manifest again from the run that saved the file.
    """


@declare("CKS305", "optimizer-param-groups-mismatch", family="consistency", severity="error")
class OptimizerParamGroupsMismatch:
    """## What it does
    Checks that the file's optimizer has the param groups the manifest records, each with the same
    parameter ids in the same order.

    ## Why is this bad?
    Optimizer state is matched to parameters by position; other groups or another order attach Adam
    moments to the wrong weights without any error.

    ## Example
    The manifest records 2 param groups, the file has 1.

    ## How to fix
    Build the optimizer with the same parameter groups as the run that saved the checkpoint.
    """


@declare("CKS306", "optimizer-state-count-mismatch", family="consistency", severity="error")
class OptimizerStateCountMismatch:
    """## What it does
    Checks that the optimizer's per-parameter state holds as many tensors as the manifest records,
    and only for parameters its param groups list.

    ## Why is this bad?
    Missing state (a parameter whose Adam moments were dropped) restarts that parameter's
    optimisation from zero; state for unknown ids belongs to another model.

    ## Example
    The manifest records `state_tensor_count: 6`; the file's `state` holds 4 tensors.

    ## How to fix
    Save the optimizer state whole (`optimizer.state_dict()`), without filtering it.
    """


@declare("CKS307", "param-map-mismatch", family="consistency", severity="error")
class ParamMapMismatch:
    """## What it does
    Checks the manifest's optimizer parameter map (index → name, shape) against the model inventory:
    every named parameter exists in the model with the same shape.

    ## Why is this bad?
    The map is how a restore matches optimizer state to parameters by name; a map naming tensors the
    model does not have, or with other shapes, restores state onto the wrong parameters.

    ## Example
    `params: [{index: 0, name: head.weight, shape: [10, 64]}]` while the model's `head.weight` is `[12, 64]`.

    ## How to fix
    Write the manifest again from the model and optimizer that saved the file.
    """


@declare("CKS308", "parameter-not-optimized", family="consistency", severity="warning")
class ParameterNotOptimized:
    """## What it does
    Checks that the optimizer's parameter map covers every model tensor recorded as a parameter.
    A tied weight, one tensor the file stores under two names (an embedding reused as the output
    projection), is covered when the optimizer holds it under either name.

    ## Why is this bad?
    A parameter outside every param group never trains. That is right for frozen layers and wrong
    for a layer added after the optimizer was built.

    ## Example
    The model inventory has `head.weight` (role parameter); no param group lists it.

    ## How to fix
    Build the optimizer after the model is complete, or mark frozen parameters `requires_grad=False`
    before building it.
    """


@declare("CKS309", "optimizer-state-shape-mismatch", family="consistency", severity="error")
class OptimizerStateShapeMismatch:
    """## What it does
    Checks that per-parameter optimizer state that must have its parameter's shape (Adam's
    `exp_avg`/`exp_avg_sq`, SGD's `momentum_buffer`, ...) has it.

    ## Why is this bad?
    State of another shape belongs to another parameter or another model (a resized head); loading
    it fails in the first step, or broadcasts silently.

    ## Example
    `optimizer_states[0].state[4].exp_avg` is `[12, 64]`, the parameter it belongs to is `[10, 64]`.

    ## How to fix
    Do not reuse optimizer state across changed architectures; start the optimizer fresh for them.
    """


def check_optimizer(ctx: Context, view: CheckpointView, record: OptimizerRecord, where: tuple[str | int, ...]) -> Iterator[Finding]:
    if view.format == "tf-bundle":
        yield from _tf_hyperparameters(ctx, view, record, where)
        yield from _tf_optimizer_state(ctx, view, record, where)
        return
    stored = view.resolve(record.at)
    groups = lookup(stored, "param_groups")
    if not isinstance(groups, list):
        return
    if len(groups) != len(record.param_groups):
        yield ctx.finding(
            OptimizerParamGroupsMismatch,
            f"{record.at}: {len(groups)} param groups in the file, {len(record.param_groups)} recorded",
            file=view.path,
            pointer=f"{record.at}/param_groups",
            path=(*where, "param_groups"),
        )
    for index, (group, recorded) in enumerate(zip(groups, record.param_groups)):
        pointer, group_path = f"{record.at}/param_groups/{index}", (*where, "param_groups", index)
        ids = [ref.index for ref in recorded.params]
        if plain(lookup(group, "params")) != ids:
            yield ctx.finding(
                OptimizerParamGroupsMismatch,
                f"{pointer}/params: parameter ids {plain(lookup(group, 'params'))} in the file, {ids} recorded",
                file=view.path,
                pointer=f"{pointer}/params",
                path=(*group_path, "params"),
            )
        yield from scalar_mismatches(
            ctx,
            OptimizerHyperparameterMismatch,
            view,
            recorded.hyperparameters,
            group,
            at=pointer,
            path=(*group_path, "hyperparameters"),
        )
    yield from _optimizer_state(ctx, view, record, lookup(stored, "state"), where)


def _optimizer_state(
    ctx: Context, view: CheckpointView, record: OptimizerRecord, state: Any, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    if not isinstance(state, Mapping):
        return
    pointer = f"{record.at}/state"
    count = sum(1 for key in view.tensors if key.startswith(pointer + "/"))
    if count != record.state_tensor_count:
        yield ctx.finding(
            OptimizerStateCountMismatch,
            f"{pointer}: {count} state tensors in the file, {record.state_tensor_count} recorded",
            file=view.path,
            pointer=pointer,
            path=(*where, "state_tensor_count"),
        )
    shapes = {ref.index: ref.shape for group in record.param_groups for ref in group.params}
    for param_id, entries in state.items():
        if param_id not in shapes:
            yield ctx.finding(
                OptimizerStateCountMismatch,
                f"{pointer}/{param_id}: state for parameter id {param_id}, which no param group lists",
                file=view.path,
                pointer=f"{pointer}/{param_id}",
                path=(*where, "param_groups"),
            )
            continue
        for name in _PARAMETER_SHAPED_STATE & set(entries if isinstance(entries, Mapping) else ()):
            tensor = view.tensors.get(f"{pointer}/{param_id}/{name}")
            if tensor is not None and shapes[param_id] is not None and list(tensor.shape) != shapes[param_id]:
                yield ctx.finding(
                    OptimizerStateShapeMismatch,
                    f"{pointer}/{param_id}/{name}: shape {list(tensor.shape)}, its parameter is {shapes[param_id]}",
                    file=view.path,
                    pointer=tensor.pointer,
                    path=(*where, "param_groups"),
                )


def _tf_optimizer_state(
    ctx: Context, view: CheckpointView, record: OptimizerRecord, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    if view.roles_unknown is not None:
        yield ctx.not_checked(OptimizerStateCountMismatch, view.roles_unknown, file=view.path, path=(*where, "state_tensor_count"))
        return
    count = sum(1 for tensor in view.tensors.values() if tensor.role in ("optimizer_slot", "optimizer_variable"))
    if count != record.state_tensor_count:
        yield ctx.finding(
            OptimizerStateCountMismatch,
            f"{count} optimizer variables and slots in the bundle, {record.state_tensor_count} recorded",
            file=view.path,
            path=(*where, "state_tensor_count"),
        )


def _tf_hyperparameters(
    ctx: Context, view: CheckpointView, record: OptimizerRecord, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    held = set(_TF_HYPERPARAMETER_OF_ROLE.values())
    checkable = [(index, group) for index, group in enumerate(record.param_groups) if held & group.hyperparameters.keys()]
    if checkable and view.roles_unknown is not None:
        yield ctx.not_checked(OptimizerHyperparameterMismatch, view.roles_unknown, file=view.path, path=(*where, "param_groups"))
        return
    stored = _tf_optimizer_variables(view, record.at)
    for index, group in checkable:
        yield from _tf_group_hyperparameters(ctx, view, group, stored, (*where, "param_groups", index, "hyperparameters"))


def _tf_group_hyperparameters(
    ctx: Context, view: CheckpointView, group: ParamGroupRecord, stored: dict[str, TensorInfo], path: tuple[str | int, ...]
) -> Iterator[Finding]:
    # A name the bundle holds no variable for (a learning rate given as a schedule) is code, not state.
    for name in sorted(group.hyperparameters.keys() & stored.keys()):
        recorded, tensor = group.hyperparameters[name], stored[name]
        value = yield from decoded(ctx, OptimizerHyperparameterMismatch, view, tensor, (*path, name))
        if value is not MISSING and not equal_at_precision(recorded, value, tensor.dtype):
            yield ctx.finding(
                OptimizerHyperparameterMismatch,
                f"{tensor.pointer}: {name} {value!r} in the file, {recorded!r} recorded",
                file=view.path,
                pointer=tensor.pointer,
                path=(*path, name),
            )


def _tf_optimizer_variables(view: CheckpointView, at: str) -> dict[str, TensorInfo]:
    """The hyperparameter variables of the optimizer whose variable `at` names, by hyperparameter name."""
    owner = variable_owner(bundle_key(at))
    return {
        _TF_HYPERPARAMETER_OF_ROLE[tensor.role]: tensor
        for tensor in view.tensors.values()
        if tensor.role in _TF_HYPERPARAMETER_OF_ROLE and variable_owner(bundle_key(tensor.pointer)) == owner
    }


def check_param_map(ctx: Context, manifest: Manifest) -> Iterator[Finding]:
    model = manifest.components.model
    if model is None:
        return
    shapes = {entry.name: entry.shape for entry in model.tensors}
    mapped: set[str] = set()
    for index, optimizer in enumerate(manifest.components.optimizer or []):
        for group_index, group in enumerate(optimizer.param_groups):
            for ref_index, ref in enumerate(group.params):
                where = ("components", "optimizer", index, "param_groups", group_index, "params", ref_index)
                if not ref.name:
                    continue
                mapped.add(ref.name)
                if ref.name not in shapes:
                    problem = "is not a tensor of the model"
                elif shapes[ref.name] != ref.shape:
                    problem = f"has shape {ref.shape} in the map, {shapes[ref.name]} in the model"
                else:
                    continue
                yield ctx.finding(ParamMapMismatch, f"optimizer parameter {ref.index} ({ref.name}) {problem}", file=ctx.manifest_path, path=where)
    if not mapped:
        return
    mapped |= _tied_to_any(ctx.view, model, mapped)
    for entry_index, entry in enumerate(model.tensors):
        if entry.role == "parameter" and entry.name not in mapped:
            yield ctx.finding(
                ParameterNotOptimized,
                f"model parameter {entry.name} is in no optimizer param group",
                file=ctx.manifest_path,
                path=("components", "model", "tensors", entry_index),
            )


def _tied_to_any(view: CheckpointView | None, model: TensorInventory, names: set[str]) -> set[str]:
    """The model tensors the file stores as one tensor with one of `names` (tied weights: the
    optimizer holds the shared parameter once, under one of its names)."""
    if view is None:
        return set()
    layouts = {entry.name: _layout(view, model, entry.name) for entry in model.tensors}
    shared = {layouts[name] for name in names if layouts.get(name) is not None}
    return {name for name, layout in layouts.items() if layout is not None and layout in shared}


def _layout(view: CheckpointView, model: TensorInventory, name: str) -> Hashable | None:
    tensor = view.tensors.get(model.at + join_pointer([name]))
    return tensor.layout if tensor is not None else None
