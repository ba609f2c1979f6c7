"""Consistency: the values inside the checkpoint agree with each other and with the manifest."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .._models import Manifest, OptimizerRecord, SchedulerRecord
from .._records import join_pointer
from ._context import Context
from ._registry import Finding, declare
from ._view import MISSING, CheckpointView

__all__ = [
    "DataPositionMismatch",
    "EpochProgressMismatch",
    "FingerprintDigestMismatch",
    "FingerprintTensorMissing",
    "GlobalStepMismatch",
    "HyperparameterMismatch",
    "OptimizerHyperparameterMismatch",
    "OptimizerParamGroupsMismatch",
    "OptimizerStateCountMismatch",
    "OptimizerStateShapeMismatch",
    "ParamMapMismatch",
    "ParameterNotOptimized",
    "ProgressCounterInverted",
    "ScalerStateMismatch",
    "SchedulerBehindLoop",
    "SchedulerStateMismatch",
    "SchedulerStepMismatch",
    "check",
]

_FIT_LOOP = "/loops/fit_loop"
_AUTOMATIC_STEPS = ("epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "total", "completed")
_MANUAL_STEPS = ("epoch_loop.manual_optimization.optim_step_progress", "total", "completed")
_EPOCHS = ("epoch_progress", "current", "completed")
_BATCH_IN_EPOCH = ("epoch_loop.batch_progress", "current", "completed")
_SCHEDULER_STEPS = ("epoch_loop.scheduler_progress", "total", "completed")
_TRACKER_ORDER = ("ready", "started", "processed", "completed")
# State entries that have their parameter's shape in every torch optimizer that keeps them.
_PARAMETER_SHAPED_STATE = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "acc_delta", "sum", "grad_avg"}


@declare("CKS301", "epoch-progress-mismatch", family="consistency", severity="error")
class EpochProgressMismatch:
    """## What it does
    Checks that a Lightning checkpoint's `epoch` equals its fit loop's
    `epoch_progress.current.completed`, the counter Lightning restores the epoch from.

    ## Why is this bad?
    The two disagree only when the checkpoint was edited or assembled from different saves; a resume
    then starts at another epoch than the file claims.

    ## Example
    `epoch: 3` while `loops.fit_loop.epoch_progress.current.completed: 2`.

    ## How to fix
    Use a checkpoint written by Lightning itself; do not edit the counters by hand.
    """


@declare("CKS302", "global-step-mismatch", family="consistency", severity="error")
class GlobalStepMismatch:
    """## What it does
    Checks that a Lightning checkpoint's `global_step` equals the optimizer steps its fit loop
    recorded (`optim_progress.optimizer.step.total.completed`, or the manual-optimization counter).

    ## Why is this bad?
    Lightning restores the global step from the loop counters, not from `global_step`: logging,
    `max_steps`, step-based schedules and `val_check_interval` silently shift.

    ## Example
    `global_step: 900` while the loop recorded 450 optimizer steps.

    ## How to fix
    Use a checkpoint written by Lightning itself; do not edit the counters by hand.
    """


@declare("CKS303", "progress-counter-inverted", family="consistency", severity="error")
class ProgressCounterInverted:
    """## What it does
    Checks every Lightning progress tracker in `loops` for the order Lightning's counters always keep:
    `ready >= started >= processed >= completed`.

    ## Why is this bad?
    Inverted counters cannot come from a real run; a resume derives batch and epoch positions from
    them and skips or repeats data.

    ## Example
    `epoch_loop.batch_progress.total: {ready: 8, completed: 9}`.

    ## How to fix
    Use a checkpoint written by Lightning itself.
    """


@declare("CKS304", "optimizer-hyperparameter-mismatch", family="consistency", severity="error")
class OptimizerHyperparameterMismatch:
    """## What it does
    Checks that each optimizer param group in the file has the hyperparameters the manifest records
    (lr, betas, eps, weight_decay, momentum, ...).

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


@declare("CKS310", "scheduler-step-mismatch", family="consistency", severity="error")
class SchedulerStepMismatch:
    """## What it does
    Checks that each scheduler's step in the file (`last_epoch`, or a TensorFlow optimizer's
    `iterations`) equals the step the manifest records.

    ## Why is this bad?
    The learning rate after a resume is computed from this step; another step means another point of
    the schedule.

    ## Example
    The manifest records `step: 500`, the file's `lr_schedulers[0].last_epoch` is `0`.

    ## How to fix
    Save the scheduler's state together with the optimizer's, at the same step.
    """


@declare("CKS311", "scheduler-state-mismatch", family="consistency", severity="error")
class SchedulerStateMismatch:
    """## What it does
    Checks each scalar of the scheduler state the manifest records (base_lrs, T_max, gamma, ...)
    against the file.

    ## Why is this bad?
    `scheduler.load_state_dict` overwrites the configured schedule with the saved one; a difference
    from the manifest means the schedule was edited after the fact.

    ## Example
    The manifest records `T_max: 1000`, the file holds `T_max: 100`.

    ## How to fix
    Find which of the two was edited; write the manifest again from the run that saved the file.
    """


@declare("CKS312", "scheduler-behind-loop", family="consistency", severity="warning")
class SchedulerBehindLoop:
    """## What it does
    Checks that a Lightning checkpoint's single scheduler has stepped as often as its fit loop's
    `scheduler_progress` says it did.

    ## Why is this bad?
    A scheduler restored from another run, or stepped outside Lightning, is at another point of its
    schedule than the training loop; the learning rate after a resume is off.

    ## Example
    `lr_schedulers[0].last_epoch: 0` while `epoch_loop.scheduler_progress.total.completed: 500`.

    ## How to fix
    Let Lightning step the scheduler (return it from `configure_optimizers`), or save its state with
    the checkpoint.
    """


@declare("CKS313", "scaler-state-mismatch", family="consistency", severity="error")
class ScalerStateMismatch:
    """## What it does
    Checks the gradient scaler's `scale` and growth tracker in the file against the manifest.

    ## Why is this bad?
    A fresh scale (65536) after a resume causes a burst of skipped steps from overflow, and hides a
    scaler that was never saved.

    ## Example
    The manifest records `scale: 1024.0`, the file's `MixedPrecision.scale` is `65536.0`.

    ## How to fix
    Save the scaler state with the checkpoint (Lightning does so for `16-mixed` precision).
    """


@declare("CKS314", "data-position-mismatch", family="consistency", severity="error")
class DataPositionMismatch:
    """## What it does
    Checks the data position the manifest records (epoch, global step, batch in epoch) against the
    values the checkpoint itself holds.

    ## Why is this bad?
    A resume positions the data from the file; a manifest that says otherwise describes another
    save, and the promise of a reproducible resume is void.

    ## Example
    The manifest records `global_step: 900`, the Lightning file holds `global_step: 450`.

    ## How to fix
    Make sure manifest and checkpoint belong to the same save.
    """


@declare("CKS315", "fingerprint-tensor-missing", family="consistency", severity="error")
class FingerprintTensorMissing:
    """## What it does
    Checks that every input and output tensor of the recorded fingerprint is stored in the checkpoint
    with the recorded dtype and shape.

    ## Why is this bad?
    The fingerprint (a fixed batch and the outputs the saved model gave on it) is what proves after a
    restore that the model computes what it computed when saved. Without its tensors, no restore can
    replay it.

    ## Example
    The manifest lists output `output`; nothing is stored at `/ckptspec/fingerprint/outputs/output`.

    ## How to fix
    Save through a ckptspec adapter with a fingerprint batch.
    """


@declare("CKS316", "fingerprint-digest-mismatch", family="consistency", severity="error")
class FingerprintDigestMismatch:
    """## What it does
    Checks the SHA-256 of every stored fingerprint tensor against the digest in the manifest.

    ## Why is this bad?
    A changed fixed batch or changed reference outputs make the replay after a restore compare
    against the wrong numbers.

    ## Example
    `outputs: [{name: output, sha256: 3a7b…}]`; the stored tensor hashes to `9c1d…`.

    ## How to fix
    Restore the checkpoint from a good copy.
    """


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


def check(ctx: Context) -> Iterator[Finding]:
    view = ctx.view
    if view is None:
        return
    if view.format == "lightning":
        yield from _lightning_counters(ctx, view)
    if ctx.manifest is None:
        return
    manifest = ctx.manifest
    for index, optimizer in enumerate(manifest.components.optimizer or []):
        yield from _optimizer(ctx, view, manifest, optimizer, ("components", "optimizer", index))
    yield from _param_map(ctx, manifest)
    schedulers = manifest.components.scheduler or []
    for index, scheduler in enumerate(schedulers):
        yield from _scheduler(ctx, view, scheduler, ("components", "scheduler", index), alone=len(schedulers) == 1)
    yield from _scaler(ctx, view, manifest)
    yield from _data_position(ctx, view, manifest)
    yield from _fingerprint(ctx, view, manifest)
    yield from _hyperparameters(ctx, view, manifest)


def _get(node: Any, *keys: str | int) -> Any:
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return MISSING
        node = node[key]
    return node


def _plain(value: Any) -> Any:
    """A file value in the form the manifest's YAML holds it: tuples as lists, ints kept."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _differs(recorded: Any, stored: Any) -> bool:
    if stored is MISSING:
        return True
    stored = _plain(stored)
    if isinstance(recorded, bool) or isinstance(stored, bool):
        return recorded is not stored and recorded != stored
    return recorded != stored


def _is_comparable(value: Any) -> bool:
    """Values the manifest can hold exactly: JSON scalars and lists or mappings of them."""
    if value is MISSING or value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_comparable(item) for item in value)
    if isinstance(value, Mapping):
        return all(_is_comparable(item) for item in value.values())
    return False


def _lightning_counters(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    fit_loop = view.resolve(_FIT_LOOP)
    if not isinstance(fit_loop, Mapping):
        return
    epoch, progress_epoch = view.resolve("/epoch"), _get(fit_loop, *_EPOCHS)
    if isinstance(epoch, int) and isinstance(progress_epoch, int) and epoch != progress_epoch:
        yield ctx.finding(
            EpochProgressMismatch,
            f"epoch is {epoch}, but loops.fit_loop.epoch_progress.current.completed is {progress_epoch}",
            file=view.path,
            pointer="/epoch",
        )
    step, loop_steps, source = view.resolve("/global_step"), *_loop_steps(fit_loop)
    if isinstance(step, int) and isinstance(loop_steps, int) and step != loop_steps:
        yield ctx.finding(
            GlobalStepMismatch,
            f"global_step is {step}, but the fit loop recorded {loop_steps} optimizer steps ({source})",
            file=view.path,
            pointer="/global_step",
        )
    yield from _trackers(ctx, view, view.resolve("/loops"), "/loops")


def _loop_steps(fit_loop: Mapping[str, Any]) -> tuple[Any, str]:
    automatic, manual = _get(fit_loop, *_AUTOMATIC_STEPS), _get(fit_loop, *_MANUAL_STEPS)
    if isinstance(manual, int) and manual > 0 and not automatic:
        return manual, ".".join(_MANUAL_STEPS)
    return automatic, ".".join(_AUTOMATIC_STEPS)


def _trackers(ctx: Context, view: CheckpointView, node: Any, pointer: str) -> Iterator[Finding]:
    if not isinstance(node, Mapping):
        return
    counters = [(name, node[name]) for name in _TRACKER_ORDER if isinstance(node.get(name), int)]
    for (higher, high), (lower, low) in zip(counters, counters[1:]):
        if low > high:
            yield ctx.finding(
                ProgressCounterInverted,
                f"{pointer}: {lower}={low} exceeds {higher}={high}",
                file=view.path,
                pointer=pointer,
            )
    for key, child in node.items():
        yield from _trackers(ctx, view, child, pointer + join_pointer([str(key)]))


def _optimizer(
    ctx: Context, view: CheckpointView, manifest: Manifest, record: OptimizerRecord, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    if view.format == "tf-bundle":
        yield from _tf_optimizer_state(ctx, view, record, where)
        return
    stored = view.resolve(record.at)
    groups = _get(stored, "param_groups")
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
        if _plain(_get(group, "params")) != ids:
            yield ctx.finding(
                OptimizerParamGroupsMismatch,
                f"{pointer}/params: parameter ids {_plain(_get(group, 'params'))} in the file, {ids} recorded",
                file=view.path,
                pointer=f"{pointer}/params",
                path=(*group_path, "params"),
            )
        for name, value in recorded.hyperparameters.items():
            stored_value = _get(group, name)
            if _is_comparable(stored_value) and _differs(value, stored_value):
                shown = "absent" if stored_value is MISSING else repr(_plain(stored_value))
                yield ctx.finding(
                    OptimizerHyperparameterMismatch,
                    f"{pointer}/{name}: {shown} in the file, {value!r} recorded",
                    file=view.path,
                    pointer=f"{pointer}/{name}",
                    path=(*group_path, "hyperparameters", name),
                )
    yield from _optimizer_state(ctx, view, record, _get(stored, "state"), where)


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
            if tensor is not None and list(tensor.shape) != shapes[param_id]:
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
    count = sum(1 for tensor in view.tensors.values() if tensor.role in ("optimizer_slot", "optimizer_variable"))
    if count != record.state_tensor_count:
        yield ctx.finding(
            OptimizerStateCountMismatch,
            f"{count} optimizer variables and slots in the bundle, {record.state_tensor_count} recorded",
            file=view.path,
            path=(*where, "state_tensor_count"),
        )


def _param_map(ctx: Context, manifest: Manifest) -> Iterator[Finding]:
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
    for entry_index, entry in enumerate(model.tensors):
        if entry.role == "parameter" and entry.name not in mapped:
            yield ctx.finding(
                ParameterNotOptimized,
                f"model parameter {entry.name} is in no optimizer param group",
                file=ctx.manifest_path,
                path=("components", "model", "tensors", entry_index),
            )


def _scheduler(
    ctx: Context, view: CheckpointView, record: SchedulerRecord, where: tuple[str | int, ...], *, alone: bool
) -> Iterator[Finding]:
    stored = view.resolve(record.at)
    step = _stored_step(view, record, stored)
    if step is not MISSING and step != record.step:
        yield ctx.finding(
            SchedulerStepMismatch,
            f"{record.at}: step {step} in the file, {record.step} recorded",
            file=view.path,
            pointer=record.at,
            path=(*where, "step"),
        )
    if isinstance(stored, Mapping):
        for name, value in record.state.items():
            stored_value = _get(stored, name)
            if _is_comparable(stored_value) and _differs(value, stored_value):
                shown = "absent" if stored_value is MISSING else repr(_plain(stored_value))
                yield ctx.finding(
                    SchedulerStateMismatch,
                    f"{record.at}/{name}: {shown} in the file, {value!r} recorded",
                    file=view.path,
                    pointer=f"{record.at}/{name}",
                    path=(*where, "state", name),
                )
        if alone and view.format == "lightning":
            yield from _scheduler_against_loop(ctx, view, record, step)


def _stored_step(view: CheckpointView, record: SchedulerRecord, stored: Any) -> Any:
    if isinstance(stored, Mapping):
        return stored.get("last_epoch", MISSING)
    tensor = view.tensors.get(record.at)
    if tensor is not None and tensor.read_scalar is not None:
        return tensor.read_scalar()
    return MISSING


def _scheduler_against_loop(ctx: Context, view: CheckpointView, record: SchedulerRecord, step: Any) -> Iterator[Finding]:
    loop_steps = _get(view.resolve(_FIT_LOOP), *_SCHEDULER_STEPS)
    if isinstance(loop_steps, int) and isinstance(step, int) and step != loop_steps:
        yield ctx.finding(
            SchedulerBehindLoop,
            f"{record.at}/last_epoch is {step}, but the fit loop stepped its scheduler {loop_steps} times",
            file=view.path,
            pointer=f"{record.at}/last_epoch",
        )


def _scaler(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    record = manifest.components.scaler
    if record is None:
        return
    stored = view.resolve(record.at)
    for key, recorded, field in (("scale", record.scale, "scale"), ("_growth_tracker", record.growth_tracker, "growth_tracker")):
        value = _get(stored, key)
        if isinstance(value, (int, float)) and value != recorded:
            yield ctx.finding(
                ScalerStateMismatch,
                f"{record.at}/{key}: {value!r} in the file, {recorded!r} recorded",
                file=view.path,
                pointer=f"{record.at}/{key}",
                path=("components", "scaler", field),
            )


def _data_position(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    record = manifest.components.data_position
    if record is None:
        return
    for field, pointer, stored in _stored_position(view, record.at):
        recorded = getattr(record, field)
        if recorded is not None and isinstance(stored, int) and stored != recorded:
            yield ctx.finding(
                DataPositionMismatch,
                f"{pointer}: {field} is {stored} in the file, {recorded} recorded",
                file=view.path,
                pointer=pointer,
                path=("components", "data_position", field),
            )


def _stored_position(view: CheckpointView, at: str | None) -> Iterator[tuple[str, str, Any]]:
    if view.format == "lightning":
        yield "epoch", "/epoch", view.resolve("/epoch")
        yield "global_step", "/global_step", view.resolve("/global_step")
        pointer = _FIT_LOOP + join_pointer(_BATCH_IN_EPOCH)
        yield "batch_in_epoch", pointer, _get(view.resolve(_FIT_LOOP), *_BATCH_IN_EPOCH)
        return
    stored = view.resolve(at) if at is not None else MISSING
    if isinstance(stored, Mapping):
        for field in ("epoch", "global_step", "batch_in_epoch", "samples_seen", "sampler_seed"):
            yield field, f"{at}/{field}", stored.get(field, MISSING)


def _fingerprint(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    record = manifest.components.fingerprint
    if record is None:
        return
    for kind, digests in (("inputs", record.inputs), ("outputs", record.outputs)):
        for index, digest in enumerate(digests):
            where = ("components", "fingerprint", kind, index)
            tensor = _fingerprint_tensor(view, record.at, kind, digest.name)
            if tensor is None or tensor.dtype != digest.dtype or list(tensor.shape) != digest.shape:
                found = "nothing" if tensor is None else f"{tensor.dtype}{list(tensor.shape)}"
                yield ctx.finding(
                    FingerprintTensorMissing,
                    f"fingerprint {kind[:-1]} {digest.name}: {digest.dtype}{digest.shape} recorded, {found} stored",
                    file=view.path,
                    pointer=tensor.pointer if tensor is not None else record.at,
                    path=where,
                )
            elif tensor.sha256() != digest.sha256:
                yield ctx.finding(
                    FingerprintDigestMismatch,
                    f"fingerprint {kind[:-1]} {digest.name}: stored tensor does not hash to the recorded sha256",
                    file=tensor.file,
                    pointer=tensor.pointer,
                    path=(*where, "sha256"),
                )


def _fingerprint_tensor(view: CheckpointView, at: str, kind: str, name: str) -> Any:
    """Where a fingerprint tensor is stored: a key of its own (TensorFlow), or, in the torch
    adapters' layout, `args/N` and `kwargs/K` for inputs and `outputs/NAME` for outputs."""
    candidates = [at + join_pointer([name])]
    if kind == "inputs":
        candidates.append(at + join_pointer(name.split(".", 1)))
    else:
        candidates.append(at + join_pointer(["outputs", name]))
    return next((view.tensors[c] for c in candidates if c in view.tensors), None)


def _hyperparameters(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    config = manifest.components.config
    stored = view.resolve("/hyper_parameters")
    if config is None or view.format != "lightning" or not isinstance(stored, Mapping):
        return
    for name, value in config.hyperparameters.items():
        stored_value = stored.get(name, MISSING)
        if _is_comparable(stored_value) and _differs(value, stored_value):
            shown = "absent" if stored_value is MISSING else repr(_plain(stored_value))
            yield ctx.finding(
                HyperparameterMismatch,
                f"/hyper_parameters/{name}: {shown} in the file, {value!r} recorded",
                file=view.path,
                pointer=f"/hyper_parameters{join_pointer([name])}",
                path=("components", "config", "hyperparameters", name),
            )
