"""The `ckptspec` command line. Exit codes: 0 clean, 1 findings, 2 could not run."""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING, Any

from .._exit import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE
from ._collector import pause, resume
from ._command_table import COMMAND_MODULES, COMMAND_SUMMARIES
from ._direct import run_directly

if TYPE_CHECKING:
    from ._group import INPUT_PATH, LOCATION, cli, format_option

__all__ = ["COMMAND_MODULES", "COMMAND_SUMMARIES", "EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_UNUSABLE", "INPUT_PATH", "LOCATION", "cli", "format_option", "main"]


def __getattr__(name: str) -> Any:
    # The click group and its parameter types load with click, which `inspect`, `validate` and
    # `audit` run without (`_direct`).
    if name in ("INPUT_PATH", "LOCATION", "cli", "format_option"):
        from . import _group

        return getattr(_group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _escape_what_cannot_be_written() -> None:
    """Names read from files can hold what no encoding writes (lone surrogates, from bytes that are not
    UTF-8): reports show them as backslash escapes instead of failing half-way through."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> None:
    # The first pydantic model built looks for plugins in the entry points of every installed
    # distribution (over ten milliseconds beside torch or TensorFlow); the command's own document
    # models have nothing for a plugin to observe. An explicit setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _escape_what_cannot_be_written()
    args = sys.argv[1:] if argv is None else list(argv)
    paused = pause()
    try:
        # On Windows click expands the wildcards of a command line it reads from `sys.argv` itself.
        code = run_directly(args) if argv is not None or os.name != "nt" else None
        if code is not None:
            sys.exit(code)
        from ._group import cli

        cli.main(args=argv, prog_name="ckptspec")
    finally:
        if paused:
            resume()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
