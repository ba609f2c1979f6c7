"""Build a `CheckpointView` of a Trainer `checkpoint-N/` or an Accelerate `save_state` directory:
each file's tree under its key, the JSON documents beside them as values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from .._exceptions import CkptspecError
from .._pointer import escape_segment
from ..formats.hf_training import NO_MODEL, locate_training_directory, read_document
from .base import CheckpointView, Problem, ViewRequest

__all__ = ["training_view"]


def training_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of the training directory `path`. A file that cannot be read is a problem naming it;
    every stored checksum of every file is verified (but those of `request.trusted_tensors`, see `open_view`)."""
    from .open import open_view

    layout = locate_training_directory(path)
    view = CheckpointView(path=path, format=layout.kind, tree={}, tensors={}, files=[])
    closers: list[Callable[[], None]] = []
    for key, document in layout.documents.items():
        view.files.append(document)
        try:
            view.tree[key] = read_document(document)
        except CkptspecError as exc:
            view.problems.append(Problem("checkpoint-corrupt", document, str(exc).removeprefix(f"{document}: ")))
    for entry in [*layout.files, *layout.subdirectories]:
        prefix = "/" + escape_segment(entry.key)
        own = [pointer[len(prefix) :] for pointer in request.trusted_tensors if pointer.startswith(prefix + "/")]
        try:
            part = open_view(entry.path, trusted_tensors=own, recorded=request.recorded)
        except CkptspecError as exc:
            view.files.append(entry.path)
            view.problems.append(Problem("checkpoint-corrupt", entry.path, str(exc).removeprefix(f"{entry.path}: ")))
            continue
        closers.append(part.close)
        view.files += part.files
        view.tree[entry.key] = part.tree
        view.tensors.update({prefix + pointer: replace(tensor, pointer=prefix + pointer) for pointer, tensor in part.tensors.items()})
        view.globals += part.globals
        for ref in part.globals:
            view.global_files.setdefault(ref.qualname, part.global_files.get(ref.qualname, entry.path))
        view.problems += [replace(problem, pointer=prefix + problem.pointer) if problem.pointer else problem for problem in part.problems]
        view.digests.update(part.digests)
    if not any(entry.component == "model" for entry in [*layout.files, *layout.subdirectories]):
        view.problems.append(Problem("checkpoint-corrupt", path, f"no model weights: {NO_MODEL}"))
    view.closer = partial(_close_all, closers)
    return view


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in closers:
        close()
