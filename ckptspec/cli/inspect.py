"""`ckptspec inspect`: what a checkpoint holds, read without running it."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..formats import Inspection
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
        _render_text(inspection, tensors)


def _render_text(inspection: Inspection, tensors: bool) -> None:
    console = Console(highlight=False)
    console.print(f"[bold]{inspection.path}[/bold]  {_headline(inspection)}")
    for key, value in inspection.metadata.items():
        console.print(f"  {key}: {value}")
    if inspection.format != "pickle":
        _render_components(console, inspection)
    if inspection.globals:
        table = Table("global", "safety", "count", title="pickle globals", title_justify="left")
        for ref in inspection.globals:
            style = {"allowed": "green", "unknown": "yellow", "dangerous": "bold red"}[ref.safety]
            table.add_row(ref.qualname, f"[{style}]{ref.safety}[/{style}]", str(ref.count))
        console.print(table)
    if tensors:
        table = Table("key", "dtype", "shape", "bytes", title="tensors", title_justify="left")
        for tensor in inspection.tensors:
            table.add_row(tensor.key, tensor.dtype, str(list(tensor.shape)), str(tensor.nbytes))
        console.print(table)


def _headline(inspection: Inspection) -> str:
    if inspection.format == "pickle":
        dangerous = sum(1 for ref in inspection.globals if ref.safety == "dangerous")
        return f"bare pickle, names {len(inspection.globals)} globals, {dangerous} dangerous"
    total = sum(t.nbytes for t in inspection.tensors)
    return f"{inspection.format}, {len(inspection.tensors)} tensors, {_size(total)}"


def _render_components(console: Console, inspection: Inspection) -> None:
    table = Table("component", "at", "tensors", "bytes", "dtypes", title="components", title_justify="left")
    for summary in inspection.component_summaries():
        dtypes = ", ".join(f"{dtype}×{count}" for dtype, count in sorted(summary.dtypes.items()))
        table.add_row(summary.name, summary.at or "/", str(summary.tensor_count), _size(summary.nbytes), dtypes)
    console.print(table)


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


COMMANDS = (inspect_command,)
