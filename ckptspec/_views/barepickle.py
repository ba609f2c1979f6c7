"""Build a `CheckpointView` of a bare pickle or of a container of pickles: no tensors ckptspec can
locate, only what loading it would call."""

from __future__ import annotations

from pathlib import Path

from ..formats.barepickle import open_bare_pickle
from ..formats.containers import appended_zip, open_container
from .base import CheckpointView, ViewRequest

__all__ = ["container_view", "pickle_view"]


def pickle_view(path: Path, request: ViewRequest) -> CheckpointView:
    bare = open_bare_pickle(path)
    return CheckpointView(
        path=bare.path,
        format="pickle",
        tree=bare.tree,
        tensors={},
        files=[bare.path],
        globals=bare.globals,
        container=appended_zip(bare.path),
    )


def container_view(path: Path, request: ViewRequest) -> CheckpointView:
    container = open_container(path)
    return CheckpointView(path=container.path, format="archive", tree=None, tensors={}, files=[container.path], container=container)
