"""Build a `CheckpointView` from the torch readers: torch.save zip archives (plain and Lightning),
legacy torch.save files and TorchScript archives."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..formats import CheckpointFormat
from ..formats.legacy_torch import LegacyTorchCheckpoint, open_legacy_checkpoint
from ..formats.lightning import LightningCheckpoint
from ..formats.torchscript import Program, TorchScriptArchive, open_torchscript
from ..formats.torchzip import RecordProblem, TensorRef, TorchCheckpoint, extent_problems, open_torch_checkpoint
from ._view import CheckpointView, Problem, TensorInfo

__all__ = ["legacy_torch_view", "tensor_info", "torch_view", "torchscript_view"]


def torch_view(path: Path, trusted_tensors: Collection[str] = ()) -> CheckpointView:
    """The view of a torch.save file; its `problems` are the zip records whose CRC-32 fails, every
    record checked but those holding only `trusted_tensors` (see `TorchCheckpoint.verify`)."""
    checkpoint = open_torch_checkpoint(path)
    try:
        return _view_of(checkpoint, trusted_tensors)
    except BaseException:
        checkpoint.close()
        raise


def legacy_torch_view(path: Path) -> CheckpointView:
    """The view of a legacy (pre-1.6) torch.save file: the same tree, no stored checksums to verify."""
    checkpoint = open_legacy_checkpoint(path)
    try:
        return _view_of(checkpoint, ())
    except BaseException:
        checkpoint.close()
        raise


def torchscript_view(path: Path, trusted_tensors: Collection[str] = ()) -> CheckpointView:
    """The view of a TorchScript archive: its tensors, and its program as a component of its own."""
    archive = open_torchscript(path)
    try:
        return _view_of(archive, trusted_tensors, "torchscript", program=archive.program)
    except BaseException:
        archive.close()
        raise


def _view_of(
    checkpoint: TorchCheckpoint | LegacyTorchCheckpoint | TorchScriptArchive,
    trusted_tensors: Collection[str],
    format: CheckpointFormat | None = None,
    program: Program | None = None,
) -> CheckpointView:
    tree = checkpoint.tree
    is_lightning = LightningCheckpoint.recognise(tree) is not None
    return CheckpointView(
        path=checkpoint.path,
        format=format or ("lightning" if is_lightning else "torch"),
        tree=tree,
        tensors={pointer: tensor_info(pointer, ref, checkpoint.path) for pointer, ref in checkpoint.tensors()},
        files=[checkpoint.path],
        globals=checkpoint.globals,
        problems=[
            *(
                Problem(kind=p.code, file=p.file, message=p.message, pointer=p.pointer)
                for p in extent_problems(checkpoint.path, checkpoint.tensors())
            ),
            *(_problem(problem) for problem in checkpoint.verify(trusted_tensors)),
        ],
        closer=checkpoint.close,
        program=program,
    )


def _problem(problem: RecordProblem) -> Problem:
    # A record holding one tensor is that tensor's damage: the finding's pointer names it, not the message.
    if len(problem.pointers) == 1:
        message = f"record {problem.record}: {problem.mismatch}"
        return Problem(kind=problem.code, file=problem.file, message=message, pointer=problem.pointers[0])
    return Problem(kind=problem.code, file=problem.file, message=problem.message)


def tensor_info(pointer: str, ref: TensorRef, path: Path) -> TensorInfo:
    return TensorInfo(
        pointer=pointer,
        dtype=ref.dtype,
        shape=ref.shape,
        file=path,
        read_crc32c=lambda: f"{ref.crc32c():08x}",
        read_sha256=ref.sha256,
    )
