"""The manifest of a file Keras just wrote: what the file holds, read back by ckptspec's own reader,
plus what only the live run knows (layer constants, optimizer settings, epoch and step)."""

from __future__ import annotations

from pathlib import Path

import keras

from .._dataclass import dataclass
from .._models import ConfigRecord, DataPositionRecord, Manifest, OptimizerRecord, ParamGroupRecord, Spec
from .._records import file_algorithms, file_entry, producer, saved_algorithms
from ..adopt import build_manifest
from ._tf_config import LiveLayer, describe_layers, optimizer_hyperparameters

__all__ = ["Position", "describe_keras_layers", "keras_manifest"]

_KNOWN_LIVE = ("config", "optimizer", "data_position")
"""Sections the reader lists as unknown that the live run records."""


@dataclass(frozen=True)
class Position:
    epoch: int
    """Epochs completed when the file was written."""
    batch_in_epoch: int | None
    """Batches of the current epoch completed, for a save in the middle of one."""


def keras_manifest(path: Path, model: keras.Model, spec: Spec | None, position: Position) -> Manifest:
    """The manifest of the file Keras just wrote at `path` (under its own name in a staging
    directory, until it takes its place); its CRC32C is always recorded, by which a reader tells the
    pending record of an interrupted save from the manifest it replaces."""
    manifest = build_manifest(path, spec)
    manifest.files = [file_entry(path, path.parent, algorithms=saved_algorithms(file_algorithms(spec)))]
    components = manifest.components
    components.config = ConfigRecord(modules=[entry.config for entry in describe_keras_layers(model)])
    optimizer = model.optimizer
    if components.optimizer and optimizer is not None:
        components.optimizer = [_optimizer_record(components.optimizer[0], optimizer)]
    components.data_position = DataPositionRecord(
        epoch=position.epoch,
        global_step=int(optimizer.iterations.numpy()) if optimizer is not None else None,
        batch_in_epoch=position.batch_in_epoch,
    )
    manifest.producer = producer({"keras": keras.__version__})
    manifest.unknown = [item for item in manifest.unknown if item.split(".")[0].split(":")[0] not in _KNOWN_LIVE]
    return manifest


def describe_keras_layers(model: keras.Model) -> list[LiveLayer]:
    """The model's layers as `describe_layers` gives them, each typed the way a `.keras` archive's
    config.json names it (`keras.layers.Dense`), so that a file's own config and its manifest compare."""
    return [
        LiveLayer(entry.path, entry.layer, entry.config.model_copy(update={"type": _serialized_type(entry.layer)}))
        for entry in describe_layers(model)
    ]


def _serialized_type(obj: keras.layers.Layer | keras.optimizers.Optimizer) -> str:
    serialized = keras.saving.serialize_keras_object(obj)
    module = serialized.get("module")
    return f"{module}.{serialized['class_name']}" if module else str(serialized["class_name"])


def _optimizer_record(read: OptimizerRecord, optimizer: keras.optimizers.Optimizer) -> OptimizerRecord:
    group = ParamGroupRecord(hyperparameters=optimizer_hyperparameters(optimizer), params=[])
    return OptimizerRecord(
        at=read.at, type=_serialized_type(optimizer), param_groups=[group], state_tensor_count=read.state_tensor_count
    )
