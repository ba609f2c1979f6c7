"""`ckptspec validate`, `audit`, `manifest`, `diff` and `rule`: the enforcement commands.

Exit codes: 0 no error-level finding, 1 at least one, 2 could not run (usage, nothing readable).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .._documents import load_spec
from .._atomic import atomic_write_bytes
from ..checks import RULES, rule_by_code
from ..report import REPORTER_BY_NAME
from .._validate import Report, Result, audit, discover, validate
from . import EXIT_CLEAN, EXIT_FINDINGS

__all__ = ["COMMANDS"]

_spec_option = click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Judge against this spec instead of the one embedded in each manifest.",
)
_format_option = click.option(
    "--format", "output_format", type=click.Choice(sorted(REPORTER_BY_NAME)), default="text", show_default=True
)
_output_option = click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here instead of stdout."
)


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_bytes(output, text.encode("utf-8"))
        click.echo(f"wrote {output}", err=True)


@click.command("validate")
@click.argument("path", type=click.Path(path_type=Path))
@_spec_option
@_format_option
@_output_option
@click.pass_context
def validate_command(ctx: click.Context, path: Path, spec_path: Path | None, output_format: str, output: Path | None) -> None:
    """Check one checkpoint (file, TensorFlow prefix, or a directory holding one) against its
    manifest and spec.

    Every finding names its rule, severity, file, key or tensor, and a one-line reason. Exit 0 when
    no finding is an error, 1 when any is, 2 when the checkpoint cannot be found or read at all.
    """
    result = validate(path, load_spec(spec_path) if spec_path else None)
    _emit(REPORTER_BY_NAME[output_format](Report([result])), output)
    ctx.exit(result.exit_code)


@click.command("audit")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@_spec_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Checkpoints checked in parallel (processes).")
@_format_option
@_output_option
@click.pass_context
def audit_command(
    ctx: click.Context, paths: tuple[Path, ...], spec_path: Path | None, jobs: int, output_format: str, output: Path | None
) -> None:
    """Validate every checkpoint found under PATHS and write one report.

    Finds Lightning and PyTorch files (.ckpt, .pt, .pth), TensorFlow bundles (.index files, data
    shards, `checkpoint` state files). Shows a progress bar on a terminal. Exit codes as `validate`;
    a checkpoint that cannot be read is a finding, not a stop.
    """
    spec = load_spec(spec_path) if spec_path else None
    found = discover(paths)
    if not found:
        raise click.UsageError(f"no checkpoints found under {', '.join(map(str, paths))}")
    report = _audit_with_progress(paths, spec, jobs, len(found))
    _emit(REPORTER_BY_NAME[output_format](report), output)
    ctx.exit(report.exit_code)


def _audit_with_progress(paths: tuple[Path, ...], spec: object, jobs: int, total: int) -> Report:
    if not sys.stderr.isatty():
        return audit(paths, spec, jobs=jobs)  # type: ignore[arg-type]
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("audit", total=total)

        def advance(_result: Result) -> None:
            progress.advance(task)

        return audit(paths, spec, jobs=jobs, on_result=advance)  # type: ignore[arg-type]


@click.command("manifest")
@click.argument("path", type=click.Path(path_type=Path))
@_spec_option
@click.option("--force", is_flag=True, help="Replace an existing manifest.")
def manifest_command(path: Path, spec_path: Path | None, force: bool) -> None:
    """Write the manifest for a checkpoint that has none (adoption of old checkpoints).

    Records everything readable without the model's code (tensors with CRC32C, optimizer and
    scheduler state, data position, files with digests) and lists under `unknown:` what it could not
    know. With --spec the manifest embeds the spec and follows its integrity settings.
    """
    from ..adopt import adopt

    written = adopt(path, load_spec(spec_path) if spec_path else None, force=force)
    click.echo(f"wrote {written}", err=True)


@click.command("diff")
@click.argument("first", type=click.Path(path_type=Path))
@click.argument("second", type=click.Path(path_type=Path))
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def diff_command(ctx: click.Context, first: Path, second: Path, output_format: str) -> None:
    """Show what differs between two checkpoints or manifests: tensors added, removed or changed,
    config constants, optimizer hyperparameters and LR, scheduler step, data position.

    Exit 0 when they are the same, 1 when they differ.
    """
    from ..diff import diff

    difference = diff(first, second)
    if output_format == "json":
        click.echo(json.dumps(difference.to_json(), indent=2))
    else:
        click.echo(difference.render_text(), nl=False)
    ctx.exit(EXIT_FINDINGS if difference.changes else EXIT_CLEAN)


@click.command("rule")
@click.argument("code", required=False)
def rule_command(code: str | None) -> None:
    """Print a rule's documentation (by code or name), or the table of all rules."""
    if code is None:
        for rule in sorted(RULES.values(), key=lambda rule: rule.code):
            click.echo(f"{rule.code}  {rule.name:<36} {rule.family:<13} {rule.severity:<8} {rule.summary}")
        return
    rule = rule_by_code(code)
    if rule is None:
        raise click.BadParameter(f"no rule {code!r}; `ckptspec rule` lists them all", param_hint="CODE")
    click.echo(f"# {rule.code} {rule.name}\n\nFamily: {rule.family}. Default severity: {rule.severity}. {rule.lifecycle.label.capitalize()}.\n")
    click.echo(rule.doc, nl=False)


COMMANDS = (validate_command, audit_command, manifest_command, diff_command, rule_command)
