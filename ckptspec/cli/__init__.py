"""The `ckptspec` command line. Exit codes: 0 clean, 1 findings, 2 could not run."""

from __future__ import annotations

import gc
import importlib
import io
import os
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._exceptions import CkptspecError
from .._storage import Location, RemotePath, location
from .._exit import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE
from .._printable import printable
from .._version import __version__

__all__ = ["COMMAND_MODULES", "COMMAND_SUMMARIES", "EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_UNUSABLE", "INPUT_PATH", "LOCATION", "cli", "main"]

EXIT_BROKEN_PIPE = 128 + 13
INPUT_PATH = click.Path(path_type=Path, readable=False)


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
"""Every path a command reads: click checks nothing, so the library says what is wrong with one
(missing, a permission, a FIFO, a symlink loop) in the same words whichever command read it."""


# Each command's module is imported only when that command runs (or help lists them all), so
# `ckptspec inspect` on a large checkpoint does not pay for the document models and the validator.
COMMAND_MODULES = {
    "audit": "validate",
    "diff": "validate",
    "init": "documents",
    "intake": "intake",
    "inspect": "inspect",
    "lineage": "lineage",
    "lint": "documents",
    "manifest": "validate",
    "rule": "validate",
    "schema": "documents",
    "sign": "sign",
    "validate": "validate",
}


# What `ckptspec --help` lists, so the listing imports no command module (`test_cli_documents`
# checks each line against the command's own help).
COMMAND_SUMMARIES = {
    "audit": "Validate every checkpoint found under PATHS (directories,...",
    "diff": "Show what differs between two checkpoints or manifests:...",
    "init": "Write a commented starter spec to stdout (or --output).",
    "intake": "Check registered model versions (models:/NAME/VERSION or...",
    "inspect": "Show what a checkpoint file or TensorFlow prefix holds,...",
    "lineage": "Check that the checkpoints under PATHS are unbroken runs:...",
    "lint": "Validate spec and manifest files against the schema.",
    "manifest": "Write the manifest for a checkpoint that has none (adoption...",
    "rule": "Print a rule's documentation (by code or name), or the table...",
    "schema": "Print, check or regenerate the published JSON Schemas.",
    "sign": "Sign the checkpoint at PATH (file, TensorFlow prefix or...",
    "validate": "Check one checkpoint (file, TensorFlow prefix, or a directory...",
}


class _Group(click.Group):
    """Loads commands on demand; turns every error into one line on stderr and exit code 2
    (tracebacks only on request)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(name)
        if module is None:
            return None
        commands = importlib.import_module(f"{__name__}.{module}").COMMANDS
        _resume_collection()
        return next(command for command in commands if command.name == name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(sorted(COMMAND_SUMMARIES.items()))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CkptspecError as exc:
            click.echo(f"error: {printable(str(exc), newlines=True)}", err=True)
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
                f"internal error: {type(exc).__name__}: {printable(str(exc), newlines=True)}\n"
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


_collection_paused = False


def _pause_collection() -> bool:
    """Stop the garbage collector while the command loads; False when it was already stopped.

    Loading a command creates tens of thousands of objects that live as long as the process (modules,
    the document models' validators, the rules) and no garbage; collecting over and over while they
    are created costs about a fifth of the CPU of validating a small checkpoint."""
    global _collection_paused
    _collection_paused = gc.isenabled()
    gc.disable()
    return _collection_paused


def _resume_collection() -> None:
    """Collect again, the loaded objects moved out of the collector's sight: nothing the command
    frees is among them, and an audit then scans only what each checkpoint allocates."""
    global _collection_paused
    if _collection_paused:
        _collection_paused = False
        gc.freeze()
        gc.enable()


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
    paused = _pause_collection()
    try:
        cli.main(args=argv, prog_name="ckptspec")
    finally:
        if paused:
            _resume_collection()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
