"""Completeness: everything the spec requires is recorded in the manifest and present in the files."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._document_values import Requirement
from ._context import Context
from ._registry import Finding, declare
from .._views.base import MISSING, CheckpointView

if TYPE_CHECKING:
    from .._models import Manifest, Spec

__all__ = [
    "COMPONENTS",
    "ComponentMissingFromFile",
    "DataPositionFieldNotRecorded",
    "ForbiddenComponentPresent",
    "OptimizerStateAbsent",
    "RequiredComponentNotRecorded",
    "RngGeneratorNotRecorded",
    "SchedulerStateAbsent",
    "check",
    "recorded_locations",
]

COMPONENTS = ("model", "config", "optimizer", "scheduler", "scaler", "ema", "rng", "data_position", "fingerprint")


@declare("CKS101", "required-component-not-recorded", family="completeness", severity="error")
class RequiredComponentNotRecorded:
    """## What it does
    Checks that every component the spec marks `require: required` is recorded in the manifest.

    ## Why is this bad?
    A checkpoint without a required component resumes without an error and silently differs from
    the run that was saved: a missing scheduler restarts the learning-rate schedule, missing RNG
    state changes dropout masks and data order, a missing fingerprint means no restore can prove
    that the model it rebuilt computes what the saved one computed.

    ## Example
    ```yaml
    # spec
    components:
      scheduler: {require: required}
    # manifest: no `components.scheduler`, e.g. a Lightning checkpoint whose `lr_schedulers` is []
    ```

    ## How to fix
    Save the component (return the scheduler from `configure_optimizers`, save through a ckptspec
    adapter so RNG state, data position and fingerprint are added), or, if the project does not
    need it, relax the spec to `require: optional`.
    """


@declare("CKS102", "component-missing-from-file", family="completeness", severity="error")
class ComponentMissingFromFile:
    """## What it does
    Checks that every component the manifest records is really present, and not empty, at its `at:`
    location in the checkpoint's object tree.

    ## Why is this bad?
    The manifest promises that the component was saved. If the key is gone (a checkpoint re-saved
    without its optimizer, a scheduler list emptied, a callback that dropped RNG state), resuming
    either fails late or, worse, silently starts that component from scratch.

    ## Example
    ```yaml
    components:
      scheduler:
        - at: /lr_schedulers/0     # but the file's lr_schedulers is []
    ```

    ## How to fix
    Re-save the checkpoint with the component, or write the manifest again so that it records what
    the file holds (`ckptspec manifest`), and let the spec decide whether that is enough.
    """


@declare("CKS103", "forbidden-component-present", family="completeness", severity="error")
class ForbiddenComponentPresent:
    """## What it does
    Checks that a component the spec marks `require: forbidden` is not recorded in the manifest.

    ## Why is this bad?
    Projects forbid components on purpose: an export for serving must not carry optimizer state
    (it triples the size and leaks training details), a weights-only artifact must not carry
    pickled hyper-parameters.

    ## Example
    ```yaml
    # spec
    components:
      optimizer: {require: forbidden}
    # manifest records components.optimizer
    ```

    ## How to fix
    Save without the component (e.g. `Trainer.save_checkpoint(path, weights_only=True)`), or relax
    the spec.
    """


@declare("CKS104", "rng-generator-not-recorded", family="completeness", severity="error")
class RngGeneratorNotRecorded:
    """## What it does
    Checks that required RNG state records every generator in the spec's `components.rng.generators`
    (`cuda` is checked only where CUDA runs, so never here).

    ## Why is this bad?
    A resumed run whose Python, NumPy or torch generator starts from a fresh seed draws other
    dropout masks, augmentations and shuffles than the uninterrupted run: the results are no longer
    reproducible, and nothing reports it.

    ## Example
    ```yaml
    # spec: rng.generators: [python, numpy, torch]
    rng:
      generators:
        - {name: torch, at: /ckptspec/rng/torch}    # python and numpy missing
    ```

    ## How to fix
    Save the missing generators' state (the ckptspec adapters capture all of them), or remove the
    generator from the spec when the project does not use it.
    """


@declare("CKS105", "data-position-field-not-recorded", family="completeness", severity="error")
class DataPositionFieldNotRecorded:
    """## What it does
    Checks that a required data position records every field in the spec's
    `components.data_position.fields` (epoch, global_step, batch_in_epoch, ...).

    ## Why is this bad?
    Without the position in the data, a resumed run replays or skips batches: it trains on a
    different sequence of data than the run that was saved.

    ## Example
    ```yaml
    # spec: data_position.fields: [epoch, global_step, batch_in_epoch]
    data_position: {epoch: 3, global_step: 900}   # batch_in_epoch missing
    ```

    ## How to fix
    Record the field when saving (the adapters read it from the training loop), or drop it from the
    spec.
    """


@declare("CKS106", "optimizer-state-absent", family="completeness", severity="error")
class OptimizerStateAbsent:
    """## What it does
    Checks, from the files alone, that a checkpoint holds the optimizer state its spec requires. A
    Lightning checkpoint needs a non-empty `optimizer_states` list, a TensorFlow bundle optimizer
    variables or slots.

    ## Why is this bad?
    A checkpoint saved with `save_weights_only=True` (or a TF `Checkpoint` that did not track the
    optimizer) resumes with a fresh optimizer: Adam's moments restart from zero and the first steps
    after the resume are far larger than they should be.

    ## Example
    A Lightning `ModelCheckpoint(save_weights_only=True)` file: no `optimizer_states` key.

    ## How to fix
    Save full checkpoints for resuming (`save_weights_only=False`, `tf.train.Checkpoint(optimizer=...)`).
    """


@declare("CKS107", "scheduler-state-absent", family="completeness", severity="error")
class SchedulerStateAbsent:
    """## What it does
    Checks, from the files alone, that a Lightning checkpoint whose spec requires a scheduler has a
    non-empty `lr_schedulers` list.

    ## Why is this bad?
    Lightning writes `lr_schedulers: []` when `configure_optimizers` returned no scheduler, and
    resuming then restarts the schedule: a cosine schedule over 1,000 steps resumed at step 500
    jumps back to its peak learning rate.

    ## Example
    `torch.load(path)["lr_schedulers"] == []` while the spec says `scheduler: {require: required}`.

    ## How to fix
    Return the scheduler from `configure_optimizers` (`{"optimizer": opt, "lr_scheduler": sched}`).
    """


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec is not None and ctx.manifest is not None:
        yield from _required_recorded(ctx, ctx.spec, ctx.manifest)
        yield from _forbidden_absent(ctx, ctx.spec, ctx.manifest)
        yield from _rng_generators(ctx, ctx.spec, ctx.manifest)
        yield from _data_position_fields(ctx, ctx.spec, ctx.manifest)
    if ctx.manifest is not None and ctx.view is not None:
        yield from _recorded_present(ctx, ctx.manifest, ctx.view)
    if ctx.spec is not None and ctx.view is not None:
        yield from _training_state_in_files(ctx, ctx.spec, ctx.view)


def recorded_locations(manifest: Manifest) -> Iterator[tuple[str, tuple[str | int, ...], str]]:
    """(component, path in the manifest, `at` pointer) for every location the manifest records."""
    parts = manifest.components
    for name in ("model", "scaler", "ema", "fingerprint", "data_position"):
        record = getattr(parts, name)
        if record is not None and record.at is not None:
            yield name, ("components", name, "at"), record.at
    for name in ("optimizer", "scheduler"):
        for index, record in enumerate(getattr(parts, name) or []):
            yield name, ("components", name, index, "at"), record.at
    if parts.rng is not None:
        for index, generator in enumerate(parts.rng.generators):
            yield "rng", ("components", "rng", "generators", index, "at"), generator.at


def _is_recorded(manifest: Manifest, name: str) -> bool:
    record = getattr(manifest.components, name)
    if record is None or record == []:
        return False
    if name == "config":
        return bool(record.modules)
    if name == "rng":
        return bool(record.generators)
    return True


def _required_recorded(ctx: Context, spec: Spec, manifest: Manifest) -> Iterator[Finding]:
    for name in COMPONENTS:
        if getattr(spec.components, name).require != Requirement.required or _is_recorded(manifest, name):
            continue
        unknown = [entry for entry in manifest.unknown if entry == name or entry.startswith(f"{name}.")]
        reason = f"the manifest lists it as unknown ({unknown[0]})" if unknown else "the manifest records none"
        if name == "config":
            reason = "the manifest records no module constants" if not unknown else reason
        yield ctx.finding(
            RequiredComponentNotRecorded,
            f"spec {spec.name!r} requires {_label(name)}; {reason}",
            file=ctx.manifest_path,
            path=("components", name),
        )


def _forbidden_absent(ctx: Context, spec: Spec, manifest: Manifest) -> Iterator[Finding]:
    for name in COMPONENTS:
        if getattr(spec.components, name).require == Requirement.forbidden and _is_recorded(manifest, name):
            yield ctx.finding(
                ForbiddenComponentPresent,
                f"spec {spec.name!r} forbids {_label(name)}, but the manifest records one",
                file=ctx.manifest_path,
                path=("components", name),
            )


def _rng_generators(ctx: Context, spec: Spec, manifest: Manifest) -> Iterator[Finding]:
    rng = manifest.components.rng
    if rng is None or spec.components.rng.require != Requirement.required:
        return
    names = [generator.name for generator in rng.generators]
    for wanted in spec.components.rng.generators:
        if wanted == "cuda" or any(_generator_matches(wanted, name) for name in names):
            continue
        yield ctx.finding(
            RngGeneratorNotRecorded,
            f"spec {spec.name!r} requires the {wanted} generator's state; the manifest records "
            f"{', '.join(names) or 'no generator'}",
            file=ctx.manifest_path,
            path=("components", "rng", "generators"),
        )


def _generator_matches(wanted: str, name: str) -> bool:
    if wanted == "tensorflow":
        return name.split(":")[0] not in ("python", "numpy", "torch", "cuda")
    return name == wanted or name.startswith(f"{wanted}:")


def _data_position_fields(ctx: Context, spec: Spec, manifest: Manifest) -> Iterator[Finding]:
    position = manifest.components.data_position
    if position is None or spec.components.data_position.require != Requirement.required:
        return
    for field in spec.components.data_position.fields:
        if getattr(position, field) is None:
            yield ctx.finding(
                DataPositionFieldNotRecorded,
                f"spec {spec.name!r} requires data_position.{field}; the manifest does not record it",
                file=ctx.manifest_path,
                path=("components", "data_position", field),
            )


def _recorded_present(ctx: Context, manifest: Manifest, view: CheckpointView) -> Iterator[Finding]:
    for name, path, at in recorded_locations(manifest):
        value = view.resolve(at)
        if value is MISSING:
            problem = f"nothing at {at or '/'}"
        elif _is_empty(value):
            problem = f"{at or '/'} is empty"
        else:
            continue
        yield ctx.finding(
            ComponentMissingFromFile,
            f"the manifest records {_label(name)} at {at or '/'}, but the checkpoint has {problem}",
            file=view.path,
            pointer=at,
            path=path,
        )


def _is_empty(value: Any) -> bool:
    return isinstance(value, (Mapping, Sequence)) and not isinstance(value, (str, bytes)) and len(value) == 0


def _training_state_in_files(ctx: Context, spec: Spec, view: CheckpointView) -> Iterator[Finding]:
    if spec.components.optimizer.require == Requirement.required:
        if view.format == "tf-bundle":
            yield from _tf_optimizer_state(ctx, view)
        if view.format == "lightning" and _is_empty_or_missing(view.resolve("/optimizer_states")):
            yield ctx.finding(
                OptimizerStateAbsent,
                "the Lightning checkpoint has no optimizer_states (saved with weights_only?)",
                file=view.path,
                pointer="/optimizer_states",
            )
    if spec.components.scheduler.require == Requirement.required and view.format == "lightning":
        if _is_empty_or_missing(view.resolve("/lr_schedulers")):
            yield ctx.finding(
                SchedulerStateAbsent,
                "the Lightning checkpoint's lr_schedulers is empty or absent",
                file=view.path,
                pointer="/lr_schedulers",
            )


def _tf_optimizer_state(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    if view.roles_unknown is not None:
        yield ctx.not_checked(OptimizerStateAbsent, view.roles_unknown, file=view.path)
    elif not any(t.component == "optimizer" for t in view.tensors.values()):
        yield ctx.finding(
            OptimizerStateAbsent,
            "the bundle holds no optimizer variables or slots (was the optimizer tracked by the Checkpoint?)",
            file=view.path,
        )


def _is_empty_or_missing(value: Any) -> bool:
    return value is MISSING or _is_empty(value)


def _label(component: str) -> str:
    return {
        "model": "the model's tensors",
        "config": "the model's construction config",
        "optimizer": "an optimizer",
        "scheduler": "a scheduler",
        "scaler": "a gradient scaler",
        "ema": "an EMA of the weights",
        "rng": "RNG state",
        "data_position": "the data position",
        "fingerprint": "a fingerprint",
    }[component]
