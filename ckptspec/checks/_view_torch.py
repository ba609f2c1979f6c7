"""Build a `CheckpointView` from the torch.save reader (plain torch and Lightning files)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..formats.lightning import LightningCheckpoint
from ..formats.torchzip import RecordProblem, TensorRef, TorchCheckpoint, open_torch_checkpoint
from ._view import CheckpointView, Problem, TensorInfo

__all__ = ["torch_view"]


def torch_view(path: Path, trusted_tensors: Collection[str] = ()) -> CheckpointView:
    """The view of a torch.save file; its `problems` are the zip records whose CRC-32 fails, every
    record checked but those holding only `trusted_tensors` (see `TorchCheckpoint.verify`)."""
    checkpoint = open_torch_checkpoint(path)
    try:
        return _view_of(checkpoint, trusted_tensors)
    except BaseException:
        checkpoint.close()
        raise


def _view_of(checkpoint: TorchCheckpoint, trusted_tensors: Collection[str]) -> CheckpointView:
    tree = checkpoint.tree
    is_lightning = LightningCheckpoint.recognise(tree) is not None
    return CheckpointView(
        path=checkpoint.path,
        format="lightning" if is_lightning else "torch",
        tree=tree,
        tensors={pointer: _tensor_info(pointer, ref, checkpoint.path) for pointer, ref in checkpoint.tensors()},
        files=[checkpoint.path],
        globals=checkpoint.globals,
        problems=[
            *(Problem(kind=p.code, file=p.file, message=p.message, pointer=p.pointer) for p in checkpoint.extent_problems()),
            *(_problem(problem) for problem in checkpoint.verify(trusted_tensors)),
        ],
        closer=checkpoint.close,
    )


def _problem(problem: RecordProblem) -> Problem:
    # A record holding one tensor is that tensor's damage: the finding's pointer names it, not the message.
    if len(problem.pointers) == 1:
        message = f"record {problem.record}: {problem.mismatch}"
        return Problem(kind=problem.code, file=problem.file, message=message, pointer=problem.pointers[0])
    return Problem(kind=problem.code, file=problem.file, message=problem.message)


def _tensor_info(pointer: str, ref: TensorRef, path: Path) -> TensorInfo:
    return TensorInfo(
        pointer=pointer,
        dtype=ref.dtype,
        shape=ref.shape,
        file=path,
        read_crc32c=lambda: f"{ref.crc32c():08x}",
        read_sha256=ref.sha256,
    )
