"""What a plain-torch `restore` reads from a loaded checkpoint, and what it checks before and
after loading it: each component found where the manifest places it, the checks that need nothing
loaded (components, construction constants, optimizer layout and settings, the model's tensors
against the manifest's CRC32C), and, once loaded, the tensors that landed and the fingerprint."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .._dataclass import dataclass
from .._exceptions import RestoreError
from .._models import UNKNOWN, Manifest, ModelRule, RngRecord, Spec
from .._pointer import split_pointer
from ._report import FingerprintReplay, HyperparameterChange
from ._torch_config import config_differences, module_configs
from ._torch_enforce import (
    ModelCheck,
    apply_overrides,
    check_model_tensors,
    component_differences,
    optimizer_differences,
    raise_if_problems,
)
from ._torch_records import parameter_names
from ._torch_replay import check_fingerprint
from ._torch_tensors import crc32c_of_many

__all__ = ["SavedParts", "before_loading", "check_loaded", "load_matching", "load_optimizers", "load_stateful", "saved_parts"]


@dataclass(frozen=True)
class SavedParts:
    """Each component's state inside a loaded checkpoint, found where its manifest says it is."""

    model: Mapping[str, Any]
    optimizers: list[Mapping[str, Any]]
    schedulers: list[Any]
    scaler: Any
    ema: Any
    rng: Any
    data_position: Any
    fingerprint: Any


def saved_parts(path: Path, manifest: Manifest, state: Any) -> SavedParts:
    """Each component's state in `state`, the checkpoint at `path` loaded; `RestoreError` when the
    manifest points at something the checkpoint does not hold."""
    components = manifest.components
    if components.model is None:
        raise RestoreError(f"{path}: its manifest records no model state dict, so there is nothing to restore")

    def at(record: Any, what: str) -> Any:
        return None if record is None or record.at is None else _stored(path, state, record.at, what)

    model = at(components.model, "the model's state dict")
    if not isinstance(model, Mapping):
        raise RestoreError(f"{path}: the manifest places the model at {components.model.at!r}, which holds no state dict")
    return SavedParts(
        model=model,
        optimizers=[at(record, f"optimizer {index}") for index, record in enumerate(components.optimizer or [])],
        schedulers=[at(record, f"scheduler {index}") for index, record in enumerate(components.scheduler or [])],
        scaler=at(components.scaler, "the scaler"),
        ema=at(components.ema, "the EMA"),
        rng=_saved_rng(path, state, components.rng),
        data_position=at(components.data_position, "the data position"),
        fingerprint=at(components.fingerprint, "the fingerprint"),
    )


def _saved_rng(path: Path, state: Any, record: RngRecord | None) -> dict[str, Any] | None:
    """Each recorded generator's state by its name, read where the manifest places it."""
    if record is None:
        return None
    return {g.name: _stored(path, state, g.at, f"the {g.name} generator's state") for g in record.generators}


def _stored(path: Path, state: Any, pointer: str, what: str) -> Any:
    value: Any = state
    for token in split_pointer(pointer):
        if isinstance(value, Mapping) and token in value:
            value = value[token]
        elif isinstance(value, (list, tuple)) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            raise RestoreError(f"{path}: the manifest places {what} at {pointer!r}, but the checkpoint holds nothing there")
    return value


def load_optimizers(
    optimizers: Sequence[torch.optim.Optimizer], saved: Sequence[Mapping[str, Any]], overrides: Mapping[str, Any]
) -> list[HyperparameterChange]:
    """Loads each optimizer's state, then sets the overrides on it."""
    changes: list[HyperparameterChange] = []
    for index, (item, state) in enumerate(zip(optimizers, saved)):
        item.load_state_dict(copy.deepcopy(state))  # the loaded optimizer must not share the checkpoint's tensors
        changes.extend(apply_overrides(index, item, overrides))
    return changes


def load_stateful(saved: SavedParts, schedulers: Sequence[Any], scaler: Any, ema: Any, data_position: Any) -> None:
    """Loads a copy of each saved state into the object given for it (`load_state_dict`)."""
    pairs = [*zip(schedulers, saved.schedulers), (scaler, saved.scaler), (ema, saved.ema), (data_position, saved.data_position)]
    for item, state in pairs:
        if item is not None and state is not None:
            item.load_state_dict(copy.deepcopy(state))


def check_loaded(
    path: Path, manifest: Manifest, saved: SavedParts, spec: Spec, model: torch.nn.Module, ema: Any
) -> tuple[ModelCheck, FingerprintReplay | None]:
    """Every saved tensor landed in the model (and the EMA), and the fixed batch replays; `RestoreError` if not."""
    components = manifest.components
    model_check = check_model_tensors(components.model.tensors, saved.model, model.state_dict(), spec.components.model)
    problems = list(model_check.problems)
    if ema is not None and components.ema is not None:
        ema_check = check_model_tensors(components.ema.tensors, saved.ema, ema.state_dict(), ModelRule())
        problems.extend(line.replace("model:", "ema:", 1) for line in ema_check.problems)
    fingerprint, lines = check_fingerprint(
        model, saved.fingerprint, spec.components.fingerprint, left_fresh=bool(model_check.left_fresh)
    )
    raise_if_problems(str(path), [*problems, *lines])
    return model_check, fingerprint


def before_loading(
    manifest: Manifest,
    saved: SavedParts,
    spec: Spec,
    given: Mapping[str, bool],
    model: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Any],
    overrides: Mapping[str, Any],
) -> tuple[list[str], list[str]]:
    """The problems that refuse the restore, and the config differences reported without refusing it."""
    components = manifest.components
    problems = component_differences(spec, manifest, given)
    problems.extend(_integrity_differences(manifest, saved.model))
    notes: list[str] = []
    if components.config is not None:
        found = config_differences(components.config.modules, module_configs(model), spec.components.config.ignore, overrides)
        problems.extend(f"config: {line}" for line in found.problems)
        notes.extend(f"config: {line}" for line in found.notes)
    saved_optimizers = components.optimizer or []
    if optimizers and len(optimizers) != len(saved_optimizers):
        problems.append(f"optimizer: the restore was given {len(optimizers)}, the checkpoint holds {len(saved_optimizers)}")
    names = parameter_names(model)
    for index, (item, record, state) in enumerate(zip(optimizers, saved_optimizers, saved.optimizers)):
        saved_groups = state.get("param_groups", []) if isinstance(state, Mapping) else []
        problems.extend(optimizer_differences(index, record, saved_groups, item, names, spec, overrides))
    saved_schedulers = components.scheduler or []
    if schedulers and len(schedulers) != len(saved_schedulers):
        problems.append(f"scheduler: the restore was given {len(schedulers)}, the checkpoint holds {len(saved_schedulers)}")
    for index, (item, record) in enumerate(zip(schedulers, saved_schedulers)):
        kind = f"{type(item).__module__}.{type(item).__qualname__}"
        if record.type != UNKNOWN and kind != record.type:
            problems.append(f"scheduler {index} is a {kind}, a {record.type} when saved")
    return problems, notes


def _integrity_differences(manifest: Manifest, saved: Mapping[str, Any]) -> list[str]:
    recorded = {entry.name: entry.crc32c for entry in manifest.components.model.tensors if entry.crc32c}
    actual = crc32c_of_many({name: saved[name] for name in recorded if name in saved})
    altered = sorted(name for name, crc in recorded.items() if actual.get(name) != crc)
    if not altered:
        return []
    return [f"checkpoint: tensors that do not match the manifest's CRC32C (file changed after saving?): {', '.join(altered)}"]


def load_matching(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Loads every saved tensor whose name and shape the model has; what it leaves out is reported later."""
    current = model.state_dict()
    matching = {name: tensor for name, tensor in state.items() if name in current and current[name].shape == tensor.shape}
    model.load_state_dict(matching, strict=False)
