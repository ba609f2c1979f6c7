"""Build a `CheckpointView` of a safetensors file or sharded index: every tensor as the model's."""

from __future__ import annotations

from pathlib import Path

from ..formats.safetensors import open_safetensors
from .base import CheckpointView, ViewRequest
from .torchzip import tensor_info

__all__ = ["safetensors_view"]


def safetensors_view(path: Path, request: ViewRequest) -> CheckpointView:
    checkpoint = open_safetensors(path)
    return CheckpointView(
        path=checkpoint.path,
        format="safetensors",
        tree=checkpoint.tree,
        tensors={pointer: tensor_info(pointer, ref, ref.storage.archive.path) for pointer, ref in checkpoint.tensors()},
        files=checkpoint.files,
        closer=checkpoint.close,
    )
