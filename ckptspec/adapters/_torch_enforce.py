"""Checks a PyTorch restore against the manifest and the spec.

Each check returns one line per problem, naming the module, tensor or value; callers gather the
lines of every check and raise a single `RestoreError`, so one run shows everything that differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import torch

from .._dataclass import dataclass
from .._exceptions import RestoreError
from .._models import UNKNOWN, Manifest, ModelRule, OptimizerRecord, Requirement, Spec, TensorEntry
from ._overrides import spec_setting_name
from ._report import HyperparameterChange
from ._spec import COMPONENTS, requirement
from ._torch_records import count_tensors, group_steps, optimizer_param_names, optimizer_state_crc32c
from ._torch_tensors import crc32c_of, dtype_name, jsonable, shape_of

__all__ = [
    "ModelCheck",
    "apply_overrides",
    "check_model_tensors",
    "component_differences",
    "dropped_notes",
    "optimizer_differences",
    "optimizer_settings",
    "raise_if_problems",
    "restored_state_differences",
    "unrecorded_notes",
]


@dataclass(frozen=True)
class ModelCheck:
    problems: list[str]
    saved: int
    loaded: int
    left_fresh: tuple[str, ...]
    ignored: tuple[str, ...]


def raise_if_problems(checkpoint: str, problems: Sequence[str]) -> None:
    if problems:
        listed = "\n".join(f"  - {line}" for line in problems)
        raise RestoreError(f"{checkpoint}: the restore would not give back the run that was saved:\n{listed}")


def _saved(manifest: Manifest, component: str) -> bool:
    return bool(getattr(manifest.components, component))


_TRAINING_STATE = ("optimizer", "scheduler", "scaler", "ema")
"""Components a resume must restore whenever the checkpoint holds one, unless the spec says `on_resume: may_drop`."""


def component_differences(spec: Spec, manifest: Manifest, given: Mapping[str, bool]) -> list[str]:
    """Required components missing from the checkpoint or from the restore, forbidden ones present, and
    training state the checkpoint holds that the restore would drop."""
    lines = []
    for name in COMPONENTS:
        wanted, saved = requirement(spec, name), _saved(manifest, name)
        if wanted is Requirement.required and not saved:
            lines.append(f"{name}: spec {spec.name!r} requires it, but the checkpoint holds none")
        elif wanted is Requirement.forbidden and saved:
            lines.append(f"{name}: spec {spec.name!r} forbids it, but the checkpoint holds one")
        elif wanted is Requirement.required and not given.get(name, False):
            lines.append(
                f"{name}: the checkpoint holds {_describe(manifest, name)} and spec {spec.name!r} requires it "
                "to be restored, but the restore was given none; without it the run continues from a fresh state"
                + _drop_hint(name)
            )
        elif saved and not given.get(name, False) and _must_restore(spec, name):
            lines.append(
                f"{name}: the checkpoint holds {_describe(manifest, name)}, but the restore was given none; "
                "optional lets a checkpoint lack it, not a resume drop it (to drop it on purpose: "
                f"components.{name}.on_resume: may_drop)"
            )
    return lines


def _drop_hint(component: str) -> str:
    if component not in _TRAINING_STATE:
        return ""
    return f" (to drop it on purpose: components.{component}: {{require: optional, on_resume: may_drop}})"


def _must_restore(spec: Spec, component: str) -> bool:
    return component in _TRAINING_STATE and getattr(spec.components, component).on_resume == "restore"


def dropped_notes(not_restored: Iterable[str]) -> list[str]:
    """One note per piece of training state a restore left out as the spec allows."""
    return [
        f"{name}: held by the checkpoint, not restored (components.{name}.on_resume: may_drop)"
        for name in not_restored
        if name in _TRAINING_STATE
    ]


def _describe(manifest: Manifest, component: str) -> str:
    value = getattr(manifest.components, component)
    if component == "scheduler":
        return ", ".join(f"{_class_name(record.type)} at step {record.step}" for record in value)
    if component == "optimizer":
        return ", ".join(_class_name(record.type) for record in value)
    if component == "rng":
        return "generators " + ", ".join(generator.name for generator in value.generators)
    if component == "data_position":
        return f"epoch {value.epoch}, global step {value.global_step}"
    return f"one at {value.at}"


def _class_name(recorded_type: str) -> str:
    return "(class not recorded)" if recorded_type == UNKNOWN else recorded_type.rsplit(".", 1)[-1]


def _matching(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def check_model_tensors(
    saved: Sequence[TensorEntry], saved_state: Mapping[str, Any], live_state: Mapping[str, torch.Tensor], rule: ModelRule
) -> ModelCheck:
    """Compares each saved tensor with the live one by shape, dtype and CRC32C: equal means loaded."""
    loaded, skipped, unexpected = 0, [], []
    for entry in saved:
        live = live_state.get(entry.name)
        if live is None:
            unexpected.append(entry.name)
        elif _loaded(entry, saved_state.get(entry.name), live):
            loaded += 1
        else:
            skipped.append(_skipped(entry, live))
    saved_names = {entry.name for entry in saved}
    missing = [name for name in live_state if name not in saved_names]
    not_loaded = [(name, text) for name, text in skipped] + [(name, f"{name} (not in the checkpoint)") for name in missing]
    left_fresh = tuple(name for name, _ in not_loaded if _matching(name, rule.allow_missing))
    ignored = tuple(name for name in unexpected if _matching(name, rule.allow_unexpected))
    problems = []
    refused = [text for name, text in not_loaded if name not in left_fresh]
    if refused:
        problems.append(
            f"model: {loaded} of {len(saved)} saved tensors were loaded; left at their fresh values: "
            f"{', '.join(refused)} (allowed only for names matching the spec's components.model.allow_missing: "
            f"{rule.allow_missing or 'none'})"
        )
    refused_unexpected = [name for name in unexpected if name not in ignored]
    if refused_unexpected:
        problems.append(
            f"model: saved tensors with no place in the model being restored: {', '.join(refused_unexpected)} "
            f"(allowed only for names matching components.model.allow_unexpected: {rule.allow_unexpected or 'none'})"
        )
    return ModelCheck(problems=problems, saved=len(saved), loaded=loaded, left_fresh=left_fresh, ignored=ignored)


def _loaded(entry: TensorEntry, saved_tensor: Any, live: torch.Tensor) -> bool:
    if dtype_name(live) != entry.dtype or shape_of(live) != entry.shape:
        return False
    expected = entry.crc32c or (crc32c_of(saved_tensor) if isinstance(saved_tensor, torch.Tensor) else None)
    return expected is not None and crc32c_of(live) == expected


def _skipped(entry: TensorEntry, live: torch.Tensor) -> tuple[str, str]:
    if shape_of(live) != entry.shape or dtype_name(live) != entry.dtype:
        return entry.name, (
            f"{entry.name} (saved {entry.dtype} {entry.shape}, model {dtype_name(live)} {shape_of(live)})"
        )
    return entry.name, f"{entry.name} (same shape, other values)"


def optimizer_differences(
    index: int,
    record: OptimizerRecord,
    saved_groups: Sequence[Mapping[str, Any]],
    optimizer: torch.optim.Optimizer,
    names: Mapping[int, str],
    spec: Spec,
    overrides: Mapping[str, Any],
) -> list[str]:
    """Type, parameter layout by name and shape, and hyperparameters that loading would silently replace
    (but for the `overrides`, already checked by `checked_overrides`)."""
    label = f"optimizer {index}"
    rule = spec.components.optimizer
    lines = []
    kind = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    if record.type != UNKNOWN and kind != record.type:
        lines.append(f"{label} is a {kind}, a {record.type} when saved")
    if rule.type and record.type != UNKNOWN and not (record.type == rule.type or record.type.endswith("." + rule.type)):
        lines.append(f"{label}: spec {spec.name!r} expects a {rule.type}, the checkpoint holds a {record.type}")
    lines.extend(_layout_differences(label, record, optimizer_param_names(optimizer, names)))
    lines.extend(_hyperparameter_differences(label, saved_groups, optimizer.param_groups, overrides, rule.overridable))
    return lines


def _layout_differences(
    label: str, record: OptimizerRecord, live: list[list[tuple[str, list[int]]]]
) -> list[str]:
    saved = [[(ref.name, ref.shape) for ref in group.params] for group in record.param_groups]
    if [len(group) for group in saved] != [len(group) for group in live]:
        return [
            f"{label}: parameters are grouped differently: group sizes {[len(group) for group in live]} "
            f"in the optimizer being restored, {[len(group) for group in saved]} when saved"
        ]
    lines = []
    for group_index, (saved_group, live_group) in enumerate(zip(saved, live)):
        for position, (before, after) in enumerate(zip(saved_group, live_group)):
            if before[0] is not None and before != after:
                lines.append(
                    f"{label}: param group {group_index} position {position} is {after[0]!r} {after[1]} in the "
                    f"optimizer being restored, {before[0]!r} {before[1]} when saved; its state would land on "
                    "the wrong parameter"
                )
    return lines


def unrecorded_notes(manifest: Manifest) -> list[str]:
    """What the manifest could not record (an adopted checkpoint) and a restore therefore did not compare."""
    components = manifest.components
    notes = []
    for kind, records in (("optimizer", components.optimizer or []), ("scheduler", components.scheduler or [])):
        notes.extend(
            f"{kind} {index}: its class was not recorded, so not compared"
            for index, record in enumerate(records)
            if record.type == UNKNOWN
        )
    for index, record in enumerate(components.optimizer or []):
        if any(ref.name is None for group in record.param_groups for ref in group.params):
            notes.append(f"optimizer {index}: its parameter names were not recorded; only the group sizes were compared")
    return notes


def _constructed(group: Mapping[str, Any], name: str) -> Any:
    # A scheduler moves `lr` and keeps the value the optimizer was built with in `initial_lr`.
    if name == "lr" and "initial_lr" in group:
        return group["initial_lr"]
    return group[name]


def _hyperparameter_differences(
    label: str,
    saved_groups: Sequence[Mapping[str, Any]],
    live_groups: Sequence[Mapping[str, Any]],
    overrides: Mapping[str, Any],
    overridable: Sequence[str],
) -> list[str]:
    lines = []
    for group_index, (saved, live) in enumerate(zip(saved_groups, live_groups)):
        shared = [key for key in saved if key in live and key not in ("params", "initial_lr") and key not in overrides]
        for key in shared:
            before, after = jsonable(_constructed(saved, key)), jsonable(_constructed(live, key))
            if before != after:
                lines.append(
                    f"{label} param group {group_index}: {key} is {after!r} in the optimizer being restored, "
                    f"{before!r} when saved; loading would silently bring back {before!r}. To change it, pass "
                    f"overrides={{{key!r}: {after!r}}} (applied after loading){_overridable_hint(key, overridable)}; "
                    f"to keep it, build the optimizer with {before!r}"
                )
    return lines


def _overridable_hint(key: str, overridable: Sequence[str]) -> str:
    if spec_setting_name(key) in {spec_setting_name(name) for name in overridable}:
        return ""
    return f" and list it in components.optimizer.overridable (now {list(overridable)})"


def optimizer_settings(optimizers: Sequence[torch.optim.Optimizer]) -> set[str] | None:
    """The hyperparameter names an override may set; `None` without an optimizer."""
    if not optimizers:
        return None
    return {key for item in optimizers for group in item.param_groups for key in group if key not in ("params", "initial_lr")}


def apply_overrides(index: int, optimizer: torch.optim.Optimizer, overrides: Mapping[str, Any]) -> list[HyperparameterChange]:
    changes = []
    for group_index, group in enumerate(optimizer.param_groups):
        for name, value in overrides.items():
            changes.append(
                HyperparameterChange(name, jsonable(group.get(name)), jsonable(value), optimizer=index, group=group_index)
            )
            group[name] = value
    return changes


def restored_state_differences(
    manifest: Manifest, restored: Iterable[str], optimizers: Sequence[torch.optim.Optimizer], schedulers: Sequence[Any], scaler: Any
) -> list[str]:
    """The live training state measured against what the manifest recorded at the save, for each
    component the restore says it `restored`: measured after every hook of the restore has run,
    before the first optimizer step, so that a hook that undid the restore shows."""
    restored = set(restored)
    problems = []
    if "optimizer" in restored:
        for index, (record, optimizer) in enumerate(zip(manifest.components.optimizer or [], optimizers)):
            problems.extend(_optimizer_state_differences(index, record, optimizer))
    if "scheduler" in restored:
        for index, (record, scheduler) in enumerate(zip(manifest.components.scheduler or [], schedulers)):
            step = getattr(scheduler, "last_epoch", None)
            if isinstance(step, int) and step != record.step:
                problems.append(f"scheduler {index}: its step count is {step} before the first step, {record.step} when saved: its state was not restored")
    saved_scaler = manifest.components.scaler
    if "scaler" in restored and saved_scaler is not None and scaler is not None and scaler.is_enabled():
        live = (float(scaler.get_scale()), int(scaler._get_growth_tracker()))
        if live != (saved_scaler.scale, saved_scaler.growth_tracker):
            problems.append(
                f"scaler: scale {live[0]} and growth tracker {live[1]} before the first step, {saved_scaler.scale} and "
                f"{saved_scaler.growth_tracker} when saved: its state was not restored"
            )
    return problems


def _optimizer_state_differences(index: int, record: OptimizerRecord, optimizer: torch.optim.Optimizer) -> list[str]:
    live = optimizer.state_dict()
    count = count_tensors(live["state"].values())
    if count != record.state_tensor_count:
        return [
            f"optimizer {index}: it holds {count} state tensors before the first step, {record.state_tensor_count} when saved: "
            "its state was not restored (a hook of the restore dropped it, or the optimizer was built anew), and its moments start again from zero"
        ]
    problems = []
    for group_index, (saved, group) in enumerate(zip(record.param_groups, live["param_groups"])):
        steps = group_steps(live["state"], group["params"])
        if saved.steps is not None and steps != saved.steps:
            problems.append(f"optimizer {index} param group {group_index}: step counts {steps} before the first step, {saved.steps} when saved")
    return problems + _moment_differences(index, record, live)


def _moment_differences(index: int, record: OptimizerRecord, live: Mapping[str, Any]) -> list[str]:
    """The first parameter whose optimizer state is not the one saved, with how many differ."""
    recorded = [
        (group_index, ref, live_index)
        for group_index, (saved, group) in enumerate(zip(record.param_groups, live["param_groups"]))
        for ref, live_index in zip(saved.params, group["params"]) if ref.state_crc32c is not None
    ]  # fmt: skip
    digests = optimizer_state_crc32c(live["state"]) if recorded else {}
    differing = [(group_index, ref, live_index) for group_index, ref, live_index in recorded if digests.get(live_index) != ref.state_crc32c]
    if not differing:
        return []
    group_index, ref, live_index = differing[0]
    name = repr(ref.name) if ref.name is not None else f"parameter {ref.index}"
    more = f"; {len(differing) - 1} more of the {len(recorded)} parameters' states differ" if len(differing) > 1 else ""
    return [
        f"optimizer {index} param group {group_index}: the state of {name} before the first step is not the one saved "
        f"(CRC32C {digests.get(live_index, 'none')}, {ref.state_crc32c} when saved): {_moments(live['state'].get(live_index))}{more}; "
        "it was replaced after the restore (by a hook or the loop), or loaded from another state"
    ]


def _moments(state: Mapping[str, Any] | None) -> str:
    moments = [value for key, value in (state or {}).items() if key != "step" and isinstance(value, torch.Tensor)]
    if not moments:
        return "it holds no state"
    if not any(bool(moment.any()) for moment in moments):
        return "its moments are all zeros, as a new optimizer's are"
    return "its moments hold other values"
