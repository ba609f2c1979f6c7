"""The click command group: every command, its help and its usage errors."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .._exceptions import CkptspecError
from .._storage import Location, RemotePath, location
from .._version import __version__
from ._collector import resume
from ._command_table import COMMAND_MODULES, COMMAND_SUMMARIES
from ._console import UsageProblem, reported

__all__ = ["INPUT_PATH", "LOCATION", "cli", "finish", "format_option"]

INPUT_PATH = click.Path(path_type=Path, readable=False)
"""Every path a command reads: click checks nothing, so the library says what is wrong with one
(missing, a permission, a FIFO, a symlink loop) in the same words whichever command read it."""


class _Location(click.ParamType):
    """A local path or a storage URL (`s3://bucket/key`, `memory://...`): where checkpoints and
    documents are read from. A URL whose protocol needs a missing package is a usage error naming it."""

    name = "path|url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Location:
        if isinstance(value, (Path, RemotePath)):
            return value
        try:
            return location(value)
        except CkptspecError as exc:
            self.fail(str(exc), param, ctx)


LOCATION = _Location()


FC = TypeVar("FC", bound=Callable[..., Any])


def format_option(choices: list[str], *, help: str) -> Callable[[FC], FC]:
    """The `--format` option every command shares; the first choice is the default."""
    return click.option(
        "--format", "output_format", type=click.Choice(choices), default=choices[0], show_default=True, help=help
    )


def finish(ctx: click.Context, body: Callable[..., int], options: dict[str, Any]) -> None:
    """Exit with what `body(**options)` returns, the command's exit code; a `UsageProblem` is
    shown as click shows a usage error, with the command's usage."""
    try:
        code = body(**options)
    except UsageProblem as problem:
        raise click.UsageError(str(problem), ctx) from None
    ctx.exit(code)


class _Group(click.Group):
    """Loads commands on demand; turns every error into one line on stderr and exit code 2
    (tracebacks only on request)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(name)
        if module is None:
            return None
        commands = importlib.import_module(f"{__package__}.{module}").COMMANDS
        resume()
        return next(command for command in commands if command.name == name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(sorted(COMMAND_SUMMARIES.items()))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            ctx.exit(reported(exc))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ckptspec")
def cli() -> None:
    """Declare, record and enforce what a training checkpoint must contain.

    A spec (YAML, written by people) says what every checkpoint of a project must hold; a manifest
    (written beside each checkpoint at save time) says what one checkpoint does hold; the files
    themselves are read without running pickle and without torch or TensorFlow.
    """
