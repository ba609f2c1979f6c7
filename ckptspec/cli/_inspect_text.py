"""The text form of `ckptspec inspect`; imported only for text output, since rich is slow to import."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._printable import printable
from ..formats import Inspection

__all__ = ["render_text"]


_PIPED_WIDTH = 1 << 16
"""Lines are never wrapped for a pipe or a file: a tool reading them wants one row per line."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # Rich exits 1 here; a reader that stopped early (`| head`) is no finding, so leave it to
        # the command line's own handling of a closed pipe.
        self.quiet = True
        raise BrokenPipeError


def render_text(inspection: Inspection, tensors: bool) -> None:
    console = _Console(highlight=False, width=None if sys.stdout.isatty() else _PIPED_WIDTH)
    console.print(Text.assemble((_shown(inspection.path), "bold"), f"  {_headline(inspection)}"))
    for key, value in inspection.metadata.items():
        console.print(Text(f"  {_shown(key)}: {_shown(value)}"))
    if inspection.format not in ("pickle", "archive"):
        _render_components(console, inspection)
    if inspection.globals:
        title = _globals_title(inspection)
        table = Table("global", "safety", "count", title=title, title_justify="left")
        for ref in inspection.globals:
            style = {"allowed": "green", "framework-record": "yellow", "dangerous": "bold red"}[ref.safety]
            table.add_row(Text(_shown(ref.qualname)), Text(ref.safety, style=style), str(ref.count))
        console.print(table)
    if tensors:
        table = Table("key", "dtype", "shape", "bytes", title="tensors", title_justify="left")
        for tensor in inspection.tensors:
            table.add_row(Text(_shown(tensor.key)), Text(_shown(tensor.dtype)), str(list(tensor.shape)), str(tensor.nbytes))
        console.print(table)


def _headline(inspection: Inspection) -> str:
    if inspection.format in ("pickle", "archive"):
        dangerous = sum(1 for ref in inspection.globals if ref.safety == "dangerous")
        what = "bare pickle" if inspection.format == "pickle" else "container of pickles"
        return f"{what}, names {len(inspection.globals)} globals, {dangerous} dangerous"
    total = sum(t.nbytes for t in inspection.tensors)
    return f"{inspection.format}, {len(inspection.tensors)} tensors, {_size(total)}"


def _render_components(console: Console, inspection: Inspection) -> None:
    table = Table("component", "at", "tensors", "bytes", "dtypes", title="components", title_justify="left")
    for summary in inspection.component_summaries():
        dtypes = ", ".join(f"{dtype}×{count}" for dtype, count in sorted(summary.dtypes.items()))
        at = summary.at or "/"
        table.add_row(Text(_shown(summary.name)), Text(_shown(at)), str(summary.tensor_count), _size(summary.nbytes), Text(_shown(dtypes)))
    console.print(table)


def _shown(value: object) -> str:
    """A value read from the file, as plain text: no rich markup, no terminal control in it."""
    return printable(str(value))


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _globals_title(inspection: Inspection) -> str:
    """What names the globals: the pickle, a .keras archive's config.json, or a legacy .h5's model_config."""
    if inspection.format != "keras":
        return "pickle globals"
    return "classes model_config names" if inspection.metadata.get("container") == "hdf5" else "classes config.json names"
