"""Manifest records of the state a checkpoint holds, built from the objects being saved.

Every function takes the state exactly as it goes into the file (a state dict) plus the live
object it came from where names live only there (parameter names, parameter vs buffer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._models import (
    DataPositionRecord,
    EmaRecord,
    OptimizerRecord,
    ParamGroupRecord,
    ParamRef,
    ScalerRecord,
    SchedulerRecord,
    TensorEntry,
    TensorInventory,
)
from ._torch_config import qualified_name
from .._records import crc32c_hex
from ._torch_tensors import crc32c_of_many, dtype_name, scalar_items, shape_of

__all__ = [
    "DATA_POSITION_FIELDS",
    "data_position_record",
    "ema_record",
    "optimizer_param_names",
    "optimizer_record",
    "optimizer_state_crc32c",
    "parameter_names",
    "scaler_record",
    "scheduler_record",
    "tensor_inventory",
    "tensor_roles",
]

DATA_POSITION_FIELDS = ("epoch", "global_step", "batch_in_epoch", "samples_seen", "sampler_seed")


def tensor_roles(module: torch.nn.Module | None) -> dict[str, str]:
    if module is None:
        return {}
    roles = {name: "buffer" for name, _ in module.named_buffers(remove_duplicate=False)}
    roles.update({name: "parameter" for name, _ in module.named_parameters(remove_duplicate=False)})
    return roles


def tensor_inventory(
    at: str,
    state: Mapping[str, Any],
    roles: Mapping[str, str],
    *,
    checksums: bool = True,
    known: Mapping[tuple[int, int], str] | None = None,
) -> TensorInventory:
    """`known`: CRC32Cs of whole storages taken as they were written (see `crc32c_of_many`)."""
    return TensorInventory(at=at, tensors=tensor_entries(state, roles, checksums=checksums, known=known))


def tensor_entries(
    state: Mapping[str, Any], roles: Mapping[str, str], *, checksums: bool, known: Mapping[tuple[int, int], str] | None = None
) -> list[TensorEntry]:
    tensors = {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}
    digests = crc32c_of_many(tensors, known) if checksums else {}
    return [
        TensorEntry(
            name=name,
            dtype=dtype_name(tensor),
            shape=shape_of(tensor),
            crc32c=digests.get(name),
            role=roles.get(name, "tensor"),  # type: ignore[arg-type]
        )
        for name, tensor in tensors.items()
    ]


def parameter_names(model: torch.nn.Module) -> dict[int, str]:
    """id(parameter) → its first name in the model."""
    names: dict[int, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), name)
    return names


def optimizer_param_names(optimizer: torch.optim.Optimizer, names: Mapping[int, str]) -> list[list[tuple[str, list[int]]]]:
    """Per param group, the (name, shape) of each parameter in the optimizer's order."""
    return [
        [(names.get(id(parameter), f"<not in the model: {tuple(parameter.shape)}>"), shape_of(parameter))
         for parameter in group["params"]]
        for group in optimizer.param_groups
    ]


def optimizer_record(
    at: str,
    optimizer: torch.optim.Optimizer,
    state: Mapping[str, Any],
    names: Mapping[int, str],
    *,
    checksums: bool = True,
    known: Mapping[tuple[int, int], str] | None = None,
) -> OptimizerRecord:
    """`known`: CRC32Cs of whole storages taken as they were written (see `crc32c_of_many`)."""
    layout = optimizer_param_names(optimizer, names)
    digests = optimizer_state_crc32c(state["state"], known) if checksums else {}
    groups = []
    for saved_group, live_names in zip(state["param_groups"], layout):
        params = [
            ParamRef(index=index, name=name, shape=shape, state_crc32c=digests.get(index))
            for index, (name, shape) in zip(saved_group["params"], live_names)
        ]
        steps = group_steps(state["state"], saved_group["params"])
        groups.append(ParamGroupRecord(hyperparameters=scalar_items(saved_group, skip=("params",)), params=params, steps=steps))
    return OptimizerRecord(
        at=at,
        type=qualified_name(optimizer),
        param_groups=groups,
        state_tensor_count=count_tensors(state["state"].values()),
    )


def optimizer_state_crc32c(per_parameter: Mapping[Any, Any], known: Mapping[tuple[int, int], str] | None = None) -> dict[Any, str]:
    """Per parameter, the CRC32C of its state (the manifest's `state_crc32c`): its step count left
    out, which `steps` records, so that moments and step counts that differ are told apart."""
    tensors = {
        (index, key): value
        for index, entry in per_parameter.items() if isinstance(entry, Mapping)
        for key, value in entry.items() if key != "step" and isinstance(value, torch.Tensor)
    }  # fmt: skip
    digests = crc32c_of_many(tensors, known)
    joined: dict[Any, list[str]] = {}
    for (index, key), digest in sorted(digests.items(), key=lambda item: str(item[0][1])):
        joined.setdefault(index, []).append(f"{key}={digest}")
    return {index: crc32c_hex(";".join(parts).encode()) for index, parts in joined.items()}


def group_steps(per_parameter: Mapping[Any, Any], indices: Iterable[Any]) -> list[int] | None:
    """The distinct step counts (Adam's `step`) the state holds for a group's parameters."""
    steps = set()
    for index in indices:
        step = per_parameter.get(index, {}).get("step") if isinstance(per_parameter.get(index), Mapping) else None
        if isinstance(step, torch.Tensor) and step.numel() == 1:
            steps.add(int(step.item()))
        elif isinstance(step, (int, float)) and not isinstance(step, bool):
            steps.add(int(step))
    return sorted(steps) or None


def count_tensors(values: Iterable[Any]) -> int:
    count = 0
    for value in values:
        if isinstance(value, torch.Tensor):
            count += 1
        elif isinstance(value, Mapping):
            count += count_tensors(value.values())
    return count


def scheduler_record(at: str, scheduler: Any, state: Mapping[str, Any]) -> SchedulerRecord:
    return SchedulerRecord(
        at=at, type=qualified_name(scheduler), step=int(state.get("last_epoch", 0)), state=scalar_items(state)
    )


def scaler_record(at: str, state: Mapping[str, Any]) -> ScalerRecord:
    rest = scalar_items(state, skip=("scale", "_growth_tracker"))
    return ScalerRecord(at=at, scale=float(state["scale"]), growth_tracker=int(state["_growth_tracker"]), state=rest)


def ema_record(at: str, ema: Any, state: Mapping[str, Any], *, checksums: bool) -> EmaRecord:
    roles = tensor_roles(ema if isinstance(ema, torch.nn.Module) else None)
    decay = getattr(ema, "decay", None)
    updates = state.get("n_averaged", getattr(ema, "updates", None))
    return EmaRecord(
        at=at,
        type=qualified_name(ema),
        decay=float(decay) if isinstance(decay, (int, float)) else None,
        updates=int(updates) if isinstance(updates, (int, torch.Tensor)) else None,
        tensors=tensor_entries(state, roles, checksums=checksums),
    )


def data_position_record(at: str, position: Mapping[str, Any]) -> DataPositionRecord:
    fields = {name: position[name] for name in DATA_POSITION_FIELDS if position.get(name) is not None}
    return DataPositionRecord(at=at, **fields)
