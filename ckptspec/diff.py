"""What differs between two checkpoints or manifests.

Both sides are compared as manifests: a manifest file is read as it is; a checkpoint is read the way
`ckptspec manifest` adopts it, taking the construction config (which no file holds) from the manifest
beside it when there is one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from ._dataclass import dataclass
from ._printable import printable
from ._storage import location
from ._documents import load_manifest
from ._sidecars import MANIFEST_SUFFIX, manifest_path_for
from ._models import Manifest
from .adopt import build_manifest
from .formats.detect import detect

__all__ = ["Change", "Difference", "diff"]

Section = Literal["tensors", "config", "optimizer", "scheduler", "scaler", "data_position", "program"]
SECTIONS: tuple[Section, ...] = ("tensors", "config", "optimizer", "scheduler", "scaler", "data_position", "program")


@dataclass(frozen=True)
class Change:
    section: Section
    key: str
    kind: Literal["added", "removed", "changed"]
    before: Any = None
    after: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "key": self.key, "kind": self.kind, "before": self.before, "after": self.after}

    @property
    def line(self) -> str:
        if self.kind == "added":
            return f"+ {self.key}: {_show(self.after)}"
        if self.kind == "removed":
            return f"- {self.key}: {_show(self.before)}"
        return f"~ {self.key}: {_show(self.before)} -> {_show(self.after)}"


@dataclass(frozen=True)
class Difference:
    first: str
    second: str
    changes: list[Change]

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "second": self.second, "changes": [change.to_json() for change in self.changes]}

    def render_text(self) -> str:
        lines = [f"--- {printable(self.first)}", f"+++ {printable(self.second)}"]
        for section in SECTIONS:
            changes = [change for change in self.changes if change.section == section]
            if changes:
                lines += [f"{section}:", *(f"  {printable(change.line)}" for change in changes)]
        if not self.changes:
            lines.append("no differences")
        return "\n".join(lines) + "\n"


def diff(first: str | Path, second: str | Path) -> Difference:
    before, after = _as_manifest(location(first)), _as_manifest(location(second))
    changes: list[Change] = []
    for section in SECTIONS:
        old, new = _FLATTEN[section](before), _FLATTEN[section](after)
        changes += _compare(section, old, new)
    return Difference(str(first), str(second), changes)


def _as_manifest(path: Path) -> Manifest:
    if path.name.endswith(MANIFEST_SUFFIX):
        return load_manifest(path)
    found = detect(path)
    adopted = build_manifest(found)
    sidecar = manifest_path_for(found.path)
    if sidecar.is_file():
        recorded = load_manifest(sidecar).components.config
        if recorded is not None:
            adopted.components.config = recorded
    return adopted


def _compare(section: Section, old: dict[str, Any], new: dict[str, Any]) -> Iterator[Change]:
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            yield Change(section, key, "removed", before=old[key])
        elif key not in old:
            yield Change(section, key, "added", after=new[key])
        elif old[key] != new[key]:
            yield Change(section, key, "changed", before=old[key], after=new[key])


def _tensors(manifest: Manifest) -> dict[str, Any]:
    flat = {}
    for name in ("model", "ema"):
        inventory = getattr(manifest.components, name)
        for entry in inventory.tensors if inventory is not None else []:
            flat[f"{name}:{entry.name}"] = {"dtype": entry.dtype, "shape": entry.shape, "crc32c": entry.crc32c}
    return flat


def _config(manifest: Manifest) -> dict[str, Any]:
    config = manifest.components.config
    if config is None:
        return {}
    flat = _prefixed("hyperparameters", config.hyperparameters)
    for module in config.modules:
        prefix = module.path or "<model>"
        flat[f"{prefix}.type"] = module.type
        flat.update(_prefixed(prefix, module.constants))
        flat.update(_prefixed(prefix, module.attributes))
    return flat


def _optimizer(manifest: Manifest) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for index, optimizer in enumerate(manifest.components.optimizer or []):
        flat.update(_prefixed(f"[{index}]", {"type": optimizer.type, "state_tensor_count": optimizer.state_tensor_count}))
        for group_index, group in enumerate(optimizer.param_groups):
            prefix = f"[{index}].param_groups[{group_index}]"
            flat.update(_prefixed(prefix, group.hyperparameters))
            flat[f"{prefix}.params"] = [ref.name or ref.index for ref in group.params]
    return flat


def _scheduler(manifest: Manifest) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for index, scheduler in enumerate(manifest.components.scheduler or []):
        # `step` is torch's last_epoch, so the state's own copy of it is left out.
        state = {key: value for key, value in scheduler.state.items() if key != "last_epoch"}
        flat.update(_prefixed(f"[{index}]", {"type": scheduler.type, "step": scheduler.step, **state}))
    return flat


def _scaler(manifest: Manifest) -> dict[str, Any]:
    scaler = manifest.components.scaler
    if scaler is None:
        return {}
    return {"scale": scaler.scale, "growth_tracker": scaler.growth_tracker, **scaler.state}


def _data_position(manifest: Manifest) -> dict[str, Any]:
    position = manifest.components.data_position
    if position is None:
        return {}
    return position.model_dump(exclude={"at"}, exclude_none=True)


def _program(manifest: Manifest) -> dict[str, Any]:
    program = manifest.components.program
    return {} if program is None else {"files": program.files, "sha256": program.sha256}


def _prefixed(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{key}": value for key, value in values.items()}


_FLATTEN = {
    "tensors": _tensors,
    "config": _config,
    "optimizer": _optimizer,
    "scheduler": _scheduler,
    "scaler": _scaler,
    "data_position": _data_position,
    "program": _program,
}


def _show(value: Any) -> str:
    if isinstance(value, Mapping) and "dtype" in value:
        crc = f" crc32c {value['crc32c']}" if value.get("crc32c") else ""
        return f"{value['dtype']}{value['shape']}{crc}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
