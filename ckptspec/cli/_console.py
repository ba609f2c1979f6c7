"""What every command writes to the terminal, and how a failure becomes one line and an exit code.

Without click: `inspect`, `validate` and `audit` run without importing it (`_direct`), and write
what `click.echo` would write, byte for byte.
"""

from __future__ import annotations

import codecs
import io
import os
import sys

from .._exceptions import CkptspecError
from .._exit import EXIT_UNUSABLE
from .._printable import printable

__all__ = ["EXIT_BROKEN_PIPE", "UsageProblem", "echo", "reported", "writes_as_is"]

EXIT_BROKEN_PIPE = 128 + 13


class UsageProblem(Exception):
    """The command line asks for something that cannot be done (click shows it with the command's
    usage). Raised before the command writes anything."""


def echo(text: str, *, nl: bool = True, err: bool = False) -> None:
    """`click.echo(text, nl=nl, err=err)`: click is imported only for what it would change, an
    escape sequence to strip or a stream it would wrap in one of its own."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if "\x1b" in text or not writes_as_is(stream):
        import click

        click.echo(text, nl=nl, err=err)
        return
    stream.write(f"{text}\n" if nl else text)
    stream.flush()


def writes_as_is(stream: object) -> bool:
    """Whether click would write to `stream` itself: a text stream with its error handling set and
    an encoding other than ASCII (for ASCII click writes UTF-8 through a wrapper)."""
    if not isinstance(stream, io.TextIOBase) or getattr(stream, "errors", None) is None:
        return False
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name != "ascii"
    except LookupError:
        return True


def reported(error: Exception) -> int:
    """The exit code for a command that raised `error`, after one line on stderr saying what went
    wrong (tracebacks only with CKPTSPEC_DEBUG)."""
    if isinstance(error, CkptspecError):
        echo(f"error: {printable(str(error), newlines=True)}", err=True)
        return EXIT_UNUSABLE
    if isinstance(error, BrokenPipeError):
        # The reader of our output went away (`ckptspec rule | head`): stop quietly, as shells do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    if os.environ.get("CKPTSPEC_DEBUG"):
        raise error
    echo(
        f"internal error: {type(error).__name__}: {printable(str(error), newlines=True)}\n"
        "This is a bug in ckptspec; set CKPTSPEC_DEBUG=1 to see the traceback and please report it.",
        err=True,
    )
    return EXIT_UNUSABLE
