"""What `ckptspec inspect` does, without click (`_direct` runs it too)."""

from __future__ import annotations

from .._exit import EXIT_CLEAN
from .._json_text import indented_json
from .._storage import Location, is_directory, location
from ..formats.inspect import inspect_checkpoint
from ._console import echo

__all__ = ["run_inspect"]


def run_inspect(path: Location, output_format: str, tensors: bool) -> int:
    inspection = inspect_checkpoint(_one_checkpoint(path))
    if output_format == "json":
        echo(indented_json(inspection.to_json(include_tensors=tensors)))
    else:
        from ._inspect_text import render_text

        render_text(inspection, tensors)
    return EXIT_CLEAN


def _one_checkpoint(path: Location) -> Location:
    """`path`, or the one checkpoint the directory at `path` holds, found as `validate` finds it."""
    target = location(path)
    if not is_directory(target):
        return target
    from .._discover import locate_checkpoint

    return locate_checkpoint(target).path
