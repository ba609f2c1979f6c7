"""Build a `CheckpointView` of a bare pickle: no tensors ckptspec can locate, only what it would call."""

from __future__ import annotations

from pathlib import Path

from ..formats.barepickle import open_bare_pickle
from ._view import CheckpointView

__all__ = ["pickle_view"]


def pickle_view(path: Path) -> CheckpointView:
    bare = open_bare_pickle(path)
    return CheckpointView(
        path=bare.path,
        format="pickle",
        tree=bare.tree,
        tensors={},
        files=[bare.path],
        globals=bare.globals,
    )
