"""The `ckptspec` command line. Exit codes: 0 clean, 1 findings, 2 could not run."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .._exceptions import CkptspecError
from .._exit import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE
from .._version import __version__

__all__ = ["EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_UNUSABLE", "cli", "main"]

EXIT_BROKEN_PIPE = 128 + 13


class _Group(click.Group):
    """Turns every error into one line on stderr and exit code 2; tracebacks only on request."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CkptspecError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_UNUSABLE)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            # The reader of our output went away (`ckptspec rule | head`): stop quietly, as shells do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(EXIT_BROKEN_PIPE)
        except Exception as exc:
            if os.environ.get("CKPTSPEC_DEBUG"):
                raise
            click.echo(
                f"internal error: {type(exc).__name__}: {exc}\n"
                "This is a bug in ckptspec; set CKPTSPEC_DEBUG=1 to see the traceback and please report it.",
                err=True,
            )
            ctx.exit(EXIT_UNUSABLE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ckptspec")
def cli() -> None:
    """Declare, record and enforce what a training checkpoint must contain.

    A spec (YAML, written by people) says what every checkpoint of a project must hold; a manifest
    (written beside each checkpoint at save time) says what one checkpoint does hold; the files
    themselves are read without running pickle and without torch or TensorFlow.
    """


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="ckptspec")


def _register() -> None:
    from . import documents, inspect, validate

    for command in (*documents.COMMANDS, *inspect.COMMANDS, *validate.COMMANDS):
        cli.add_command(command)


_register()

if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
