"""The text form of `ckptspec inspect`.

The layout is built once, as lines and tables of styled text. A terminal gets it through rich (bold,
colours, wrapped to the window). A pipe or a file gets the same characters rich would print there,
drawn here without importing rich, which takes longer to import than the inspection takes to run;
anything rich would draw otherwise (text beyond printable ASCII, whose width in cells is rich's to
measure, an encoding other than UTF-8, colours forced by the environment) still goes through rich.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence

from .._printable import printable
from ..formats import Inspection

__all__ = ["render_text"]

Styled = tuple[str, str]
"""A run of text and its rich style ("" for none)."""

_PIPED_WIDTH = 1 << 16
"""Lines are never wrapped for a pipe or a file: a tool reading them wants one row per line."""

_FORCING_TERMINAL = ("FORCE_COLOR", "TTY_COMPATIBLE")
"""Variables that make rich write a pipe as if it were a terminal."""


class _Table:
    def __init__(self, title: str, *headers: str) -> None:
        self.title = title
        self.headers = headers
        self.rows: list[tuple[Styled, ...]] = []

    def add_row(self, *cells: str | Styled) -> None:
        self.rows.append(tuple((cell, "") if isinstance(cell, str) else cell for cell in cells))



def render_text(inspection: Inspection, tensors: bool) -> None:
    blocks = list(_blocks(inspection, tensors))
    if _drawn_here(blocks):
        sys.stdout.write("".join(_plain(block) for block in blocks))
        sys.stdout.flush()
    else:
        _render_rich(blocks)


def _blocks(inspection: Inspection, tensors: bool) -> Iterator[list[Styled] | _Table]:
    yield [(_shown(inspection.path), "bold"), (f"  {_headline(inspection)}", "")]
    for key, value in inspection.metadata.items():
        yield [(f"  {_shown(key)}: {_shown(value)}", "")]
    if inspection.format not in ("pickle", "archive"):
        yield _components(inspection)
    if inspection.globals:
        table = _Table(_globals_title(inspection), "global", "safety", "count")
        for ref in inspection.globals:
            style = {"allowed": "green", "framework-record": "yellow", "dangerous": "bold red"}[ref.safety]
            table.add_row(_shown(ref.qualname), (ref.safety, style), str(ref.count))
        yield table
    if tensors:
        table = _Table("tensors", "key", "dtype", "shape", "bytes")
        for tensor in inspection.tensors:
            table.add_row(_shown(tensor.key), _shown(tensor.dtype), str(list(tensor.shape)), str(tensor.nbytes))
        yield table


def _components(inspection: Inspection) -> _Table:
    table = _Table("components", "component", "at", "tensors", "bytes", "dtypes")
    for summary in inspection.component_summaries():
        dtypes = ", ".join(f"{dtype}×{count}" for dtype, count in sorted(summary.dtypes.items()))
        table.add_row(_shown(summary.name), _shown(summary.at or "/"), str(summary.tensor_count), _size(summary.nbytes), _shown(dtypes))
    return table


# --- drawn here, for a pipe or a file ---------------------------------------------------------------


def _drawn_here(blocks: Sequence[list[Styled] | _Table]) -> bool:
    if sys.stdout.isatty() or any(os.environ.get(name) for name in _FORCING_TERMINAL):
        return False
    if not (getattr(sys.stdout, "encoding", None) or "").lower().startswith("utf"):
        return False
    return all(_plain_ascii(block) for block in blocks)


def _plain_ascii(block: list[Styled] | _Table) -> bool:
    if isinstance(block, list):
        return all(_ascii(text) for text, _ in block)
    # Dtypes are joined with "×", one cell wide; every title is narrower than its headers.
    cells = [block.title, *block.headers, *(text.replace("×", "x") for row in block.rows for text, _ in row)]
    return all(_ascii(text) for text in cells)


def _ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _plain(block: list[Styled] | _Table) -> str:
    if isinstance(block, list):
        return "".join(text for text, _ in block) + "\n"
    widths = _widths(block)
    lines = [
        block.title.ljust(_table_width(widths)),
        _rule("┏", "━", "┳", "┓", widths),
        _row("┃", block.headers, widths),
        _rule("┡", "━", "╇", "┩", widths),
        *(_row("│", [text for text, _ in row], widths) for row in block.rows),
        _rule("└", "─", "┴", "┘", widths),
    ]
    return "\n".join(lines) + "\n"


def _widths(table: _Table) -> list[int]:
    return [max([len(header), *(len(row[column][0]) for row in table.rows)]) for column, header in enumerate(table.headers)]


def _table_width(widths: Sequence[int]) -> int:
    return sum(width + 3 for width in widths) + 1


def _rule(left: str, line: str, cross: str, right: str, widths: Sequence[int]) -> str:
    return left + cross.join(line * (width + 2) for width in widths) + right


def _row(edge: str, cells: Sequence[str], widths: Sequence[int]) -> str:
    return edge + edge.join(f" {cell.ljust(width)} " for cell, width in zip(cells, widths)) + edge


# --- through rich, for a terminal and whatever rich must measure ------------------------------------


def _render_rich(blocks: Sequence[list[Styled] | _Table]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # Rich exits 1 here; a reader that stopped early (`| head`) is no finding, so leave it to
            # the command line's own handling of a closed pipe.
            self.quiet = True
            raise BrokenPipeError

    console = _Console(highlight=False, width=None if sys.stdout.isatty() else _PIPED_WIDTH)
    for block in blocks:
        if isinstance(block, list):
            console.print(Text.assemble(*block))
            continue
        table = Table(*block.headers, title=block.title, title_justify="left")
        for row in block.rows:
            table.add_row(*(Text(text, style=style) for text, style in row))
        console.print(table)


def _headline(inspection: Inspection) -> str:
    if inspection.format in ("pickle", "archive"):
        dangerous = sum(1 for ref in inspection.globals if ref.safety == "dangerous")
        what = "bare pickle" if inspection.format == "pickle" else "container of pickles"
        return f"{what}, names {len(inspection.globals)} globals, {dangerous} dangerous"
    total = sum(t.nbytes for t in inspection.tensors)
    return f"{inspection.format}, {len(inspection.tensors)} tensors, {_size(total)}"


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
