"""`ckptspec inspect`: what a checkpoint holds, read without running it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .._storage import is_directory, location
from ..formats.inspect import inspect_checkpoint
from . import LOCATION, format_option

__all__ = ["COMMANDS"]


@click.command("inspect")
@click.argument("path", type=LOCATION)
@format_option(["text", "json"], help="A readable summary, or the inspection as JSON.")
@click.option("--tensors", is_flag=True, help="List every tensor, not only the totals per component.")
def inspect_command(path: Path, output_format: str, tensors: bool) -> None:
    """Show what a checkpoint file or TensorFlow prefix holds, without torch or TensorFlow.

    Lists components with tensor counts, dtypes and bytes, scalar metadata such as epoch and global
    step, and every pickle global with its safety class. A bare pickle file shows the globals it
    would call. A damaged checkpoint is an error (exit 2), never a summary.
    """
    inspection = inspect_checkpoint(_one_checkpoint(path))
    if output_format == "json":
        click.echo(json.dumps(inspection.to_json(include_tensors=tensors), indent=2))
    else:
        from ._inspect_text import render_text

        render_text(inspection, tensors)


COMMANDS = (inspect_command,)


def _one_checkpoint(path: Path) -> Path:
    """`path`, or the one checkpoint the directory at `path` holds, found as `validate` finds it."""
    target = location(path)
    if not is_directory(target):
        return target
    from .._discover import locate_checkpoint

    return locate_checkpoint(target).path
