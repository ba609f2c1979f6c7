"""Hugging Face training directories, read without torch, transformers or accelerate.

Two layouts, each one checkpoint of several files:

- A Trainer `checkpoint-N/` (`Trainer._save_checkpoint`): the model (`model.safetensors`, its
  sharded index, a PEFT `adapter_model.safetensors`, or a legacy `pytorch_model.bin`), `config.json`
  (the construction config no state dict holds), `optimizer.pt`, `scheduler.pt`, `scaler.pt`,
  `rng_state.pth` (`rng_state_{rank}.pth` with several processes), `trainer_state.json` (step,
  epoch, batch size, log history) and `training_args.bin` (the pickled `TrainingArguments`, which
  no resume loads). Under DeepSpeed the weights and optimizer are in a tag directory
  (`global_stepN/`, named by `latest`); under FSDP in DCP directories (`pytorch_model_fsdp_0/`,
  `optimizer_0/`).
- An Accelerate `save_state` directory: `model.safetensors` (`model_{i}.safetensors`,
  `pytorch_model.bin`), `optimizer.bin`, `scheduler.bin`, `sampler.bin`, `dl_state_dict.bin`,
  `scaler.pt`, `random_states_{rank}.pkl` (a torch zip despite its name) and
  `custom_checkpoint_{i}.pkl` (objects registered with `register_for_checkpointing`).

Each file is read by the reader of its own format; its tree sits in the directory's tree under
its `key` (the file name up to its first dot; `model` for a sharded index).
"""

from __future__ import annotations

import json
import re
from dataclasses import field, replace
from pathlib import Path
from typing import Any, Literal

from .._dataclass import dataclass
from .._exceptions import CorruptCheckpointError, ReaderError
from .._pointer import escape_segment
from ._inspection import Inspection
from ._io import read_bytes, unreadable
from ._names import ACCELERATE_RNG, training_directory_kind
from .._sidecars import TRAINER_STATE

__all__ = [
    "CALLBACK_RECORD",
    "NO_MODEL",
    "TrainingFile",
    "TrainingLayout",
    "framework_wrote",
    "inspect_training_directory",
    "locate_training_directory",
    "saved_with_callback",
]

CALLBACK_RECORD = "ckptspec"
"""The key of `ckptspec.transformers.CkptspecCallback`'s record among the stateful callbacks of `trainer_state.json`."""
NO_MODEL = "none of model.safetensors (or its index), adapter_model.safetensors, pytorch_model.bin, or a DeepSpeed or FSDP directory"
_DOCUMENT_LIMIT = 64 << 20
"""More than any config or trainer state (a log history of a million entries); a larger file is not read."""

Layout = Literal["hf-trainer", "accelerate"]

_TRAINER_FILES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("model", re.compile(r"^(?:model|adapter_model)\.safetensors$|^model\.safetensors\.index\.json$")),
    ("model", re.compile(r"^(?:pytorch_model|adapter_model)\.bin$")),
    ("optimizer", re.compile(r"^optimizer\.pt$")),
    ("scheduler", re.compile(r"^scheduler\.pt$")),
    ("scaler", re.compile(r"^scaler\.pt$")),
    ("rng", re.compile(r"^rng_state(?:_\d+)?\.pth$")),
    ("arguments", re.compile(r"^training_args\.bin$")),
    ("fingerprint", re.compile(r"^ckptspec_fingerprint\.safetensors$")),
)
_ACCELERATE_FILES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("model", re.compile(r"^model(?:_\d+)?\.safetensors$|^pytorch_model(?:_\d+)?\.bin$")),
    ("optimizer", re.compile(r"^optimizer(?:_\d+)?\.bin$")),
    ("scheduler", re.compile(r"^scheduler(?:_\d+)?\.bin$")),
    ("scaler", re.compile(r"^scaler\.pt$")),
    ("rng", ACCELERATE_RNG),
    ("sampler", re.compile(r"^sampler(?:_\d+)?\.bin$")),
    ("dataloader", re.compile(r"^dl_state_dict(?:_\d+)?\.bin$")),
    ("custom", re.compile(r"^custom_checkpoint_\d+\.pkl$")),
)
"""Each component's files, by name, as each framework writes them."""
_DOCUMENTS = ("config.json", "adapter_config.json", "generation_config.json", TRAINER_STATE)
"""The JSON files a Trainer checkpoint holds beside the state files."""
_SUBDIRECTORIES = re.compile(r"^global_step\d+$|^pytorch_model_fsdp_\d+$|^optimizer_\d+$")
"""DeepSpeed's tag directory and FSDP's DCP directories inside a Trainer checkpoint."""


@dataclass(frozen=True)
class TrainingFile:
    component: str
    """model, optimizer, scheduler, scaler, rng, sampler, dataloader, custom, or arguments
    (`training_args.bin`: read for its globals, never needed to resume)."""
    path: Path
    key: str
    """The file's place in the directory's tree."""


@dataclass
class TrainingLayout:
    directory: Path
    kind: Layout
    files: list[TrainingFile] = field(default_factory=list)
    """The state files, read by their own format's reader, in name order."""
    documents: dict[str, Path] = field(default_factory=dict)
    """Key → JSON file (`config`, `trainer_state`, ...)."""
    subdirectories: list[TrainingFile] = field(default_factory=list)
    """DeepSpeed and FSDP directories, each read as the checkpoint it is."""


def locate_training_directory(directory: Path) -> TrainingLayout:
    """The files of the Trainer or Accelerate checkpoint `directory`, by component. Files neither
    framework writes are not part of it (`ckptspec audit` judges them on their own: `framework_wrote`)."""
    try:
        children = sorted(directory.iterdir())
    except OSError as exc:
        raise unreadable(directory, exc) from None
    kind = training_directory_kind({child.name for child in children})
    if kind is None:
        raise ReaderError(f"{directory}: neither a Trainer checkpoint ({TRAINER_STATE}) nor an Accelerate save_state (random_states_0.pkl)")
    layout = TrainingLayout(directory, kind)
    for child in children:
        name = child.name
        if kind == "hf-trainer" and name in _DOCUMENTS:
            layout.documents[name.split(".")[0]] = child
        elif kind == "hf-trainer" and _SUBDIRECTORIES.match(name) and child.is_dir():
            component = "model" if name.startswith(("global_step", "pytorch_model")) else "optimizer"
            layout.subdirectories.append(TrainingFile(component, child, name))
        elif component := _component(kind, name):
            key = "model" if name.endswith(".index.json") else name.split(".")[0]
            layout.files.append(TrainingFile(component, child, key))
    return layout


def framework_wrote(kind: Layout, name: str, *, directory: bool) -> bool:
    """Whether the file (or `directory`) `name` in a `kind` checkpoint is one its framework writes,
    read as part of the checkpoint; anything else there is judged on its own."""
    if directory:
        return kind == "hf-trainer" and _SUBDIRECTORIES.match(name) is not None
    return (kind == "hf-trainer" and name in _DOCUMENTS) or _component(kind, name) is not None


def _component(kind: Layout, name: str) -> str | None:
    patterns = _TRAINER_FILES if kind == "hf-trainer" else _ACCELERATE_FILES
    return next((component for component, pattern in patterns if pattern.match(name)), None)


def saved_with_callback(directory: Path) -> bool:
    """Whether the Trainer checkpoint `directory` was saved with `ckptspec.transformers.CkptspecCallback`:
    its `trainer_state.json` holds the callback's record (a checkpoint whose manifest is then missing
    was being saved when the process stopped, after the Trainer wrote it)."""
    try:
        state = read_document(directory / TRAINER_STATE)
    except (ReaderError, CorruptCheckpointError):
        return False
    callbacks = state.get("stateful_callbacks") if isinstance(state, dict) else None
    return isinstance(callbacks, dict) and isinstance(callbacks.get(CALLBACK_RECORD), dict)


def read_document(path: Path) -> Any:
    """A JSON file of the checkpoint, or `CorruptCheckpointError` saying why it is not one."""
    data = read_bytes(path, _DOCUMENT_LIMIT)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise CorruptCheckpointError(f"{path}: not valid JSON: {reason}") from None


_RUN_FACTS = ("global_step", "epoch", "max_steps", "num_train_epochs", "train_batch_size", "logging_steps", "save_steps")
"""What `trainer_state.json` says of the run that `inspect` shows."""


def inspect_training_directory(path: Path) -> Inspection:
    """Summarise a Trainer or Accelerate checkpoint: each file's tensors under `/<key>`, each
    component at its first file; the run facts of `trainer_state.json`."""
    from .inspect import inspect_checkpoint

    layout = locate_training_directory(path)
    parts = [(entry, inspect_checkpoint(entry.path)) for entry in [*layout.files, *layout.subdirectories]]
    if not any(entry.component == "model" for entry, _ in parts):
        raise CorruptCheckpointError(f"{path}: no model weights: {NO_MODEL}")
    components: dict[str, str] = {}
    tensors = []
    for entry, part in parts:
        prefix = "/" + escape_segment(entry.key)
        components.setdefault(entry.component, prefix)
        tensors += [replace(tensor, key=prefix + tensor.key, component=entry.component) for tensor in part.tensors]
    metadata: dict[str, Any] = {"layout": layout.kind, "files": {entry.key: entry.path.name for entry, _ in parts}}
    if "trainer_state" in layout.documents:
        state = read_document(layout.documents["trainer_state"])
        if isinstance(state, dict):
            metadata |= {fact: state[fact] for fact in _RUN_FACTS if isinstance(state.get(fact), (int, float))}
        components["data_position"] = "/trainer_state"
    if "config" in layout.documents:
        components["config"] = "/config"
    return Inspection(
        path=str(path),
        format=layout.kind,
        files=[summary for _, part in parts for summary in part.files],
        tensors=tensors,
        globals=[ref for _, part in parts for ref in part.globals],
        metadata=metadata,
        components=components,
    )
