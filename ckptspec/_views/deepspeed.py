"""Build a `CheckpointView` of a DeepSpeed save: each rank file's tree under its file stem."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from .._exceptions import CkptspecError
from .._pointer import escape_segment
from ..formats.deepspeed import locate_deepspeed
from .base import CheckpointView, Problem, ViewRequest
from .torchzip import sniffed_torch_view

__all__ = ["deepspeed_view"]


def deepspeed_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a DeepSpeed save directory or tag directory. A missing tag or rank file, and a
    rank file that cannot be read, are `problems`; every record of every file is verified."""
    layout = locate_deepspeed(path)
    layout.check_rank_files()
    view = CheckpointView(
        path=path,
        format="deepspeed",
        tree={},
        tensors={},
        files=[*([layout.latest] if layout.latest else []), *layout.files],
        problems=[Problem(kind, file, message) for kind, file, message in layout.problems],
    )
    closers: list[Callable[[], None]] = []
    for file in layout.files:
        try:
            part = sniffed_torch_view(file)
        except CkptspecError as exc:
            view.problems.append(Problem("checkpoint-corrupt", file, str(exc).removeprefix(f"{file}: ")))
            continue
        prefix = "/" + escape_segment(file.stem)
        view.tree[file.stem] = part.tree
        view.tensors.update({prefix + pointer: replace(tensor, pointer=prefix + pointer) for pointer, tensor in part.tensors.items()})
        view.globals.extend(part.globals)
        view.problems.extend(replace(p, pointer=prefix + p.pointer) if p.pointer else p for p in part.problems)
        closers.append(part.close)
    view.closer = partial(_close_all, closers)
    return view


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in closers:
        close()
