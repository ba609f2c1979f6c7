"""`ckptspec inspect`: what a checkpoint holds, read without running it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..formats.detect import inspect_checkpoint

__all__ = ["COMMANDS"]


@click.command("inspect")
# readable=False: the readers say what is wrong with a file (permission, FIFO, symlink loop) themselves.
@click.argument("path", type=click.Path(path_type=Path, readable=False))
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--tensors", is_flag=True, help="List every tensor, not only the totals per component.")
def inspect_command(path: Path, output_format: str, tensors: bool) -> None:
    """Show what a checkpoint file or TensorFlow prefix holds, without torch or TensorFlow.

    Lists components with tensor counts, dtypes and bytes, scalar metadata such as epoch and global
    step, and every pickle global with its safety class. A bare pickle file shows the globals it
    would call. A damaged checkpoint is an error (exit 2), never a summary.
    """
    inspection = inspect_checkpoint(path)
    if output_format == "json":
        click.echo(json.dumps(inspection.to_json(include_tensors=tensors), indent=2))
    else:
        from ._inspect_text import render_text

        render_text(inspection, tensors)


COMMANDS = (inspect_command,)
