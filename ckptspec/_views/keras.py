"""Build a `CheckpointView` from the Keras reader (`.keras` archives and `.weights.h5` files)."""

from __future__ import annotations

from pathlib import Path

from ..formats.keras import KerasFile, KerasTensor, open_keras
from .base import CheckpointView, Problem, TensorInfo, ViewRequest

__all__ = ["keras_view"]


def keras_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a Keras file. The archive's CRC-32 of the whole weights member is checked only when
    some tensor's CRC32C is not compared with a manifest (`request.trusted_tensors`): reading it twice is the cost."""
    keras_file = open_keras(path)
    try:
        tensors = {tensor.pointer: _tensor_info(keras_file, tensor) for tensor in keras_file.tensors.values()}
        whole_member = not set(tensors) <= set(request.trusted_tensors)
        problems = [
            Problem(kind=problem.kind, file=keras_file.path, message=problem.message, pointer=problem.pointer)
            for problem in keras_file.verify(whole_member=whole_member)
        ]
        return CheckpointView(
            path=keras_file.path,
            format="keras",
            tree={tensor.key: tensors[tensor.pointer] for tensor in keras_file.tensors.values()},
            tensors=tensors,
            files=[keras_file.path],
            globals=keras_file.code,
            problems=problems,
            layers=keras_file.layers,
            closer=keras_file.close,
        )
    except BaseException:
        keras_file.close()
        raise


def _tensor_info(keras_file: KerasFile, tensor: KerasTensor) -> TensorInfo:
    return TensorInfo(
        pointer=tensor.pointer,
        dtype=tensor.dataset.dtype,
        shape=tensor.dataset.shape,
        file=keras_file.path,
        component=tensor.component,
        read_crc32c=lambda: f"{keras_file.crc32c(tensor):08x}",
        read_sha256=lambda: keras_file.sha256(tensor),
    )
