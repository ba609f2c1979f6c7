"""Build a `CheckpointView` from the torch readers: torch.save zip archives (plain and Lightning),
legacy torch.save files and TorchScript archives."""

from __future__ import annotations

import functools
import struct
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from .._scan import FileDigests, scan
from .._storage import resolved
from ..formats import CheckpointFormat
from ..formats.lightning import LightningCheckpoint
from ..formats.torchzip import TorchCheckpoint, open_torch_checkpoint
from ..formats._tensors import RecordProblem, TensorRef, extent_problems
from .base import CheckpointView, Problem, TensorInfo, ViewRequest

if TYPE_CHECKING:
    from ..formats.legacy_torch import LegacyTorchCheckpoint
    from ..formats.torchscript import Program, TorchScriptArchive

__all__ = ["legacy_torch_view", "sniffed_torch_view", "tensor_info", "torch_view", "torchscript_view"]


def torch_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a torch.save file `detect` found; its `problems` are the zip records whose CRC-32
    fails, every record checked but those holding only `request.trusted_tensors` (see
    `TorchCheckpoint.verify`).

    One pass over the file computes its recorded digests and the trusted tensors' CRC32Cs. When
    the file's digests (CRC32C or SHA-256) are the recorded ones, every byte is as it was written
    and the records are not read again; otherwise they are, to name the damaged ones."""
    return _view_of(TorchCheckpoint(path), request.trusted_tensors, request.digests_of(path))


def sniffed_torch_view(path: Path, trusted_tensors: Collection[str] = ()) -> CheckpointView:
    """The view of a file of a directory checkpoint that should be a torch.save archive, refused
    naming what it is when it is not one."""
    return _view_of(open_torch_checkpoint(path), trusted_tensors, FileDigests())


def legacy_torch_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a legacy (pre-1.6) torch.save file: the same tree, no stored checksums to verify."""
    from ..formats.legacy_torch import open_legacy_checkpoint

    return _view_of(open_legacy_checkpoint(path), (), request.digests_of(path))


def torchscript_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a TorchScript archive: its tensors, and its program as a component of its own."""
    from ..formats.torchscript import open_torchscript

    archive = open_torchscript(path)
    return _view_of(archive, request.trusted_tensors, request.digests_of(path), "torchscript", program=archive.program)


def _view_of(
    checkpoint: TorchCheckpoint | LegacyTorchCheckpoint | TorchScriptArchive,
    trusted_tensors: Collection[str],
    recorded: FileDigests,
    format: CheckpointFormat | None = None,
    program: Program | None = None,
) -> CheckpointView:
    """The view of an open torch file, closed again when building its view fails."""
    try:
        tree = checkpoint.tree
        is_lightning = LightningCheckpoint.recognise(tree) is not None
        refs = dict(checkpoint.tensors())
        overruns = extent_problems(checkpoint.path, refs.items())
        unreadable = {problem.pointer for problem in overruns}
        ranges = {
            pointer: ref.byte_range
            for pointer, ref in refs.items()
            if pointer in trusted_tensors and pointer not in unreadable and ref.crc32c_is_span
        }
        scanned = scan(checkpoint.path, algorithms=recorded.algorithms, crc32c_ranges=ranges.values())
        crc32c_of = {pointer: scanned.range_crc32c.get(span, 0) for pointer, span in ranges.items()}
        intact = recorded.intact(scanned.digests)
        return CheckpointView(
            path=checkpoint.path,
            format=format or ("lightning" if is_lightning else "torch"),
            tree=tree,
            tensors={pointer: tensor_info(pointer, ref, checkpoint.path, crc32c_of.get(pointer)) for pointer, ref in refs.items()},
            files=[checkpoint.path],
            globals=checkpoint.globals,
            problems=[
                *(Problem(kind=p.code, file=p.file, message=p.message, pointer=p.pointer) for p in overruns),
                *([] if intact else [_problem(problem) for problem in checkpoint.verify(trusted_tensors)]),
            ],
            digests={resolved(checkpoint.path): scanned.digests} if recorded.algorithms else {},
            closer=checkpoint.close,
            program=program,
        )
    except BaseException:
        checkpoint.close()
        raise


def _problem(problem: RecordProblem) -> Problem:
    # A record holding one tensor is that tensor's damage: the finding's pointer names it, not the message.
    if len(problem.pointers) == 1:
        message = f"record {problem.record}: {problem.mismatch}"
        return Problem(kind=problem.code, file=problem.file, message=message, pointer=problem.pointers[0])
    return Problem(kind=problem.code, file=problem.file, message=problem.message)


def tensor_info(pointer: str, ref: TensorRef, path: Path, crc32c: int | None = None) -> TensorInfo:
    """The view's entry for one tensor; `crc32c` when a scan already computed it."""
    return TensorInfo(
        pointer=pointer,
        dtype=ref.dtype,
        shape=ref.shape,
        file=path,
        layout=(ref.storage.key, ref.storage_offset, ref.stride, ref.dtype, ref.shape),
        read_crc32c=lambda: f"{ref.crc32c() if crc32c is None else crc32c:08x}",
        read_sha256=ref.sha256,
        read_scalar=functools.partial(_scalar, ref) if ref.numel == 1 and ref.dtype in _SCALAR_FORMATS else None,
    )


_SCALAR_FORMATS = {"float64": "d", "float32": "f", "float16": "e", "int64": "q", "int32": "i", "int16": "h", "int8": "b", "uint8": "B", "bool": "?"}
"""struct formats of the dtypes whose one-element tensors are read as numbers (a step count, a loss scale)."""


def _scalar(ref: TensorRef) -> float | int | bool:
    """The value of a one-element tensor, from its bytes (little-endian, as every torch.save on
    today's machines writes them)."""
    value: float | int | bool = struct.unpack(f"<{_SCALAR_FORMATS[ref.dtype]}", ref.read_bytes())[0]
    return value
