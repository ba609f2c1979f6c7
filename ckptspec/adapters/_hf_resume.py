"""The Hugging Face Trainer callback's resume checks: the live model, optimizer, scheduler, data
position, construction config and fingerprint against the record the resumed `trainer_state.json`
carries, at `on_train_begin`, and this rank's optimizer moments and generators at the first step;
each returns the lines naming what differs, and `refuse_resume` raises them as one `RestoreError`.
What the spec lets change or drop is not compared."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import torch

from .._exceptions import RestoreError
from .._models import Requirement, Spec
from ._hf_state import (
    construction_config,
    dataset_length,
    optimizer_state,
    optimizer_steps,
    parameter_name,
    process_rank,
    rng_digest,
    samples_before,
    scheduler_step,
    unwrapped,
)
from ._spec import requirement
from ._torch_replay import capture_fingerprint_for, fingerprint_differences, replay_fingerprint

__all__ = [
    "compared_with_record",
    "config_problems",
    "data_position_problems",
    "fingerprint_problems",
    "model_key_problems",
    "moment_problems",
    "refuse_resume",
    "rng_problems",
    "training_state_problems",
]


def refuse_resume(checkpoint: str, problems: list[str]) -> None:
    listed = "\n".join(f"  - {line}" for line in problems)
    raise RestoreError(f"{checkpoint}: the resume would not continue the run that was saved:\n{listed}")


def _must_restore(spec: Spec | None, component: str) -> bool:
    if spec is None:
        return True
    rule = getattr(spec.components, component)
    return requirement(spec, component) is not Requirement.forbidden and rule.on_resume != "may_drop"


def compared_with_record(saved: Mapping[str, Any], spec: Spec | None, checks_rng: bool) -> list[str]:
    """What the resume compared with the record of the save: the lineage's `attested`."""
    compared = {
        "config": saved.get("config") is not None,
        "optimizer": _must_restore(spec, "optimizer") and bool(saved.get("optimizer_steps") or saved.get("optimizer_state")),
        "scheduler": _must_restore(spec, "scheduler") and bool(saved.get("scheduler_step")),
        "rng": checks_rng and bool(saved.get("rng")),
        "fingerprint": saved.get("fingerprint") is not None,
    }
    return ["model", *(name for name, done in compared.items() if done)]


def moment_problems(saved: Mapping[str, Any], optimizer: Any, model: Any, spec: Spec | None) -> list[str]:
    """This rank's optimizer state against the CRC32Cs saved of it, parameter by parameter."""
    recorded = saved.get("optimizer_state") or []
    rank = process_rank()
    if not _must_restore(spec, "optimizer") or rank >= len(recorded) or not isinstance(recorded[rank], Mapping):
        return []
    live = optimizer_state(optimizer)
    differing = [index for index, digest in recorded[rank].items() if live.get(index) != digest]
    if not differing:
        return []
    where = f" on rank {rank}" if len(recorded) > 1 else ""
    more = f"; {len(differing) - 1} more of the {len(recorded[rank])} parameters' states differ" if len(differing) > 1 else ""
    return [
        f"optimizer.pt: the optimizer state of {parameter_name(optimizer, model, differing[0])}{where} is not the one saved before the first step "
        f"(CRC32C {live.get(differing[0], 'none')}, {recorded[rank][differing[0]]} when saved){more}: "
        "a callback or the Trainer's load replaced the moments after the restore"
    ]


def rng_problems(saved: Mapping[str, Any]) -> list[str]:
    digests = saved.get("rng") or []
    rank = process_rank()
    if rank >= len(digests) or digests[rank] == rng_digest():
        return []
    name = "rng_state.pth" if len(digests) == 1 else f"rng_state_{rank}.pth"
    return [
        f"{name}: the random generators were not restored: the state differs from the one saved "
        "(the Trainer only logs at INFO when the file is missing); dropout and data order will differ from the saved run"
    ]


def training_state_problems(saved: Mapping[str, Any], optimizer: Any, scheduler: Any, spec: Spec | None) -> list[str]:
    problems = []
    joint = "(the Trainer loads optimizer.pt and scheduler.pt only when both are there, and skips both silently otherwise)"
    saved_steps, saved_scheduler = saved.get("optimizer_steps"), saved.get("scheduler_step")
    if _must_restore(spec, "optimizer") and saved_steps and optimizer_steps(optimizer) != saved_steps:
        problems.append(
            f"optimizer.pt: the optimizer was not restored: its state has taken {optimizer_steps(optimizer) or 0} steps, "
            f"the saved one {saved_steps} {joint}"
        )
    if _must_restore(spec, "scheduler") and saved_scheduler and scheduler_step(scheduler) != saved_scheduler:
        problems.append(
            f"scheduler.pt: the learning-rate scheduler was not restored: it stands at step {scheduler_step(scheduler) or 0}, "
            f"the saved one at {saved_scheduler} {joint}"
        )
    return problems


def data_position_problems(saved: Mapping[str, Any], args: Any, dataloader: Any, global_step: int, spec: Spec | None) -> list[str]:
    if spec is not None and (
        requirement(spec, "data_position") is Requirement.forbidden or spec.components.data_position.on_resume == "may_change"
    ):
        return []
    now = {
        "dataset_length": dataset_length(dataloader),
        "per_device_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "world_size": max(args.world_size, 1),
    }
    changed = [key for key, value in now.items() if saved.get(key) is not None and value is not None and saved[key] != value]
    if not changed:
        return []
    consumed, skipped = samples_before(saved, global_step), samples_before(now, global_step)
    listed = ", ".join(f"{key} {saved[key]} saved, {now[key]} now" for key in changed)
    return [
        f"trainer_state.json: the data position does not carry over: {listed}. The saved run had consumed {consumed} samples; "
        f"the Trainer recomputes the position from this dataloader and will skip {skipped}, so samples are trained twice or never "
        "(to resume on other data on purpose, set components.data_position.on_resume: may_change in the spec)"
    ]


def config_problems(saved: Mapping[str, Any] | None, model: Any, spec: Spec | None) -> list[str]:
    live = construction_config(model)
    if saved is None or live is None or (spec is not None and requirement(spec, "config") is Requirement.forbidden):
        return []
    ignored = list(spec.components.config.ignore) if spec is not None else []
    problems = []
    for key in sorted(set(saved) | set(live)):
        if saved.get(key) != live.get(key) and not any(fnmatch.fnmatchcase(key, pattern) for pattern in ignored):
            problems.append(
                f"config.json: {key} is {saved.get(key)!r} in the checkpoint, {live.get(key)!r} in the model it is loaded into "
                "(the weights load without a warning, the model computes otherwise)"
            )
    return problems


def model_key_problems(saved: list[str] | None, model: Any, spec: Spec | None) -> list[str]:
    if saved is None or model is None:
        return []
    live = set(model.state_dict())
    rule = spec.components.model if spec is not None else None
    missing = [key for key in sorted(live - set(saved)) if not _matches(key, rule.allow_missing if rule else [])]
    unexpected = [key for key in sorted(set(saved) - live) if not _matches(key, rule.allow_unexpected if rule else [])]
    problems = []
    if missing:
        problems.append(f"model: {len(missing)} tensors of the model are not in the checkpoint and keep their fresh values: {_few(missing)}")
    if unexpected:
        problems.append(f"model: {len(unexpected)} saved tensors were ignored by the Trainer's non-strict load: {_few(unexpected)}")
    return problems


def fingerprint_problems(saved: Mapping[str, Any] | None, model: Any, fingerprint_batch: Any, spec: Spec | None) -> list[str]:
    if saved is None or model is None:
        return []
    if fingerprint_batch is None:
        return ["fingerprint: the checkpoint recorded a fingerprint; pass the same fingerprint_batch to CkptspecCallback to replay it"]
    replayed = replay_fingerprint(unwrapped(model), capture_fingerprint_for("CkptspecCallback", unwrapped(model), fingerprint_batch))
    outputs = {name: torch.tensor(values["data"], dtype=getattr(torch, values["dtype"])).reshape(values["shape"]) for name, values in saved["outputs"].items()}
    rule = spec.components.fingerprint if spec is not None else None
    lines = fingerprint_differences(outputs, replayed, atol=rule.atol if rule else 0.0, rtol=rule.rtol if rule else 0.0)
    return [f"fingerprint: {line}" for line in lines]


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f", ... ({len(names) - 5} more)" if len(names) > 5 else "")
