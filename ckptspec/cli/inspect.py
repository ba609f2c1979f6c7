"""`ckptspec inspect`: what a checkpoint holds, read without running it."""

from __future__ import annotations

from typing import Any

import click

from ._group import LOCATION, finish, format_option
from ._inspecting import run_inspect

__all__ = ["COMMANDS"]


@click.command("inspect")
@click.argument("path", type=LOCATION)
@format_option(["text", "json"], help="A readable summary, or the inspection as JSON.")
@click.option("--tensors", is_flag=True, help="List every tensor, not only the totals per component.")
@click.pass_context
def inspect_command(ctx: click.Context, **options: Any) -> None:
    """Show what a checkpoint file or TensorFlow prefix holds, without torch or TensorFlow.

    Lists components with tensor counts, dtypes and bytes, scalar metadata such as epoch and global
    step, and every pickle global with its safety class. A bare pickle file shows the globals it
    would call. A damaged checkpoint is an error (exit 2), never a summary.
    """
    finish(ctx, run_inspect, options)


COMMANDS = (inspect_command,)
