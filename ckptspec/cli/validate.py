"""`ckptspec validate`, `audit`, `manifest`, `diff` and `rule`: the enforcement commands.

Exit codes: 0 no error-level finding, 1 at least one, 2 could not run (usage, nothing readable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .._documents import load_spec
from .._exit import EXIT_CLEAN, EXIT_FINDINGS
from .._printable import printable
from .._result import Executor
from ..checks import RULES, rule_by_code
from ..formats.detect import FORMATS, FileFormat
from ..report import REPORTER_BY_NAME
from ._enforcing import run_audit, run_validate
from ._group import INPUT_PATH, LOCATION, finish, format_option

__all__ = ["COMMANDS"]

_spec_option = click.option(
    "--spec",
    "spec_path",
    type=LOCATION,
    help="The operator's spec: judge completeness by it instead of each manifest's own, and trust the pickle "
    "globals it allows. Without it, pickle globals are judged by the built-in allow-list alone.",
)
_require_spec_option = click.option(
    "--require-spec",
    is_flag=True,
    help="Make a manifest judged without any spec (CKS004) an error instead of a warning.",
)
_replay_option = click.option(
    "--replay",
    is_flag=True,
    help="Also run each checkpoint's fixed batch through the program exported beside it (<checkpoint>.pt2, or <prefix>.keras for TensorFlow) and compare the outputs (needs torch, or TensorFlow).",
)
_trusted_key_option = click.option(
    "--trusted-key",
    "trusted_keys",
    type=INPUT_PATH,
    multiple=True,
    help="A public key (PEM) whose signatures are trusted, besides the spec's `signature.trusted_keys`; repeatable.",
)
_trusted_certificate_option = click.option(
    "--trusted-certificate",
    "trusted_certificates",
    type=INPUT_PATH,
    multiple=True,
    help="A certificate chain (PEM) that signing certificates must lead to; repeatable.",
)
_require_signature_option = click.option(
    "--require-signature", is_flag=True, help="An unsigned checkpoint is an error (as `signature.require: true`)."
)
_executor_option = click.option(
    "--executor",
    default="local",
    show_default=True,
    metavar="local|dask|dask://HOST:PORT",
    callback=lambda _ctx, _param, value: _executor(value),
    help="Where the checks run: a local process pool, a Dask LocalCluster of --jobs workers, or a running Dask scheduler (needs the dask extra).",
)
_embedded_spec_option = click.option(
    "--spec",
    "spec_path",
    type=LOCATION,
    help="Embed this spec in the manifest (validate then judges against it) and record the digests its integrity settings ask for.",
)
_format_option = format_option(
    ["text", *sorted(set(REPORTER_BY_NAME) - {"text"})],
    help="How to write the report: for people (text, markdown) or for tools (json, junit, sarif).",
)
_output_option = click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here instead of stdout."
)


@click.command("validate")
@click.argument("path", type=LOCATION)
@_spec_option
@_require_spec_option
@_trusted_key_option
@_trusted_certificate_option
@_require_signature_option
@_replay_option
@_format_option
@_output_option
@click.pass_context
def validate_command(ctx: click.Context, **options: Any) -> None:
    """Check one checkpoint (file, TensorFlow prefix, or a directory holding one) against its
    manifest and spec.

    Every finding names its rule, severity, file, key or tensor, and a one-line reason. Exit 0 when
    no finding is an error, 1 when any is (a damaged checkpoint included), 2 when validation cannot
    run: nothing at PATH, a format ckptspec does not read (TorchScript, pre-1.6 torch, DCP), or an
    --output that names one of the files judged.
    """
    finish(ctx, run_validate, options)


@click.command("audit")
@click.argument("paths", nargs=-1, required=True, type=LOCATION)
@_spec_option
@_require_spec_option
@_trusted_key_option
@_trusted_certificate_option
@_require_signature_option
@_replay_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Checkpoints checked in parallel (processes).")
@_executor_option
@click.option("--follow-symlinks", is_flag=True, help="Search directories behind symbolic links too.")
@click.option("--lineage", is_flag=True, help="Also judge the checkpoints as runs (the rules of `ckptspec lineage`).")
@_format_option
@_output_option
@click.pass_context
def audit_command(ctx: click.Context, **options: Any) -> None:
    """Validate every checkpoint found under PATHS (directories, files, TensorFlow prefixes) and
    write one report.

    Every file is recognised by its content, never by its name alone. Judged: TensorFlow bundles
    (.index files, data shards, `checkpoint` state files, whose paths are never followed out of
    PATHS), DCP directories, and every file a loader would unpickle. Each other file is listed with
    why it is not judged (CKS015), and one whose loader can run code in a format ckptspec cannot
    judge yet is a finding (CKS016). Kinds recognised by content:

    \b
    {kinds}

    Directories behind symbolic links are searched only with --follow-symlinks. Shows a progress
    bar on a terminal. Exit codes as `validate`; a checkpoint that cannot be read, or a directory
    that cannot be searched, is a finding, not a stop.
    """
    finish(ctx, run_audit, options)


def _executor(value: str) -> Executor | None:
    """The executor `--executor` names; None: the local process pool."""
    if value == "local":
        return None
    if value == "dask" or (value.startswith("dask://") and len(value) > len("dask://")):
        from .._dask import dask_executor

        return dask_executor(value)
    raise click.BadParameter(f"{value!r}: expected local, dask or dask://HOST:PORT", param_hint="--executor")


def _kinds_help() -> str:
    def verdict(found: FileFormat) -> str:
        if found.reader is not None:
            return "judged"
        return "a finding (CKS016)" if found.runs_code else "listed (CKS015)"

    # Indented as the docstring it goes into, which click dedents as a whole.
    return "\n    ".join(f"- {found.name}: {found.description}: {verdict(found)}" for found in FORMATS)


audit_command.help = (audit_command.help or "").replace("{kinds}", _kinds_help())


@click.command("manifest")
@click.argument("path", type=LOCATION)
@_embedded_spec_option
@click.option("--force", is_flag=True, help="Replace an existing manifest.")
@click.pass_context
def manifest_command(ctx: click.Context, path: Path, spec_path: Path | None, force: bool) -> None:
    """Write the manifest for a checkpoint that has none (adoption of old checkpoints).

    Records everything readable without the model's code (tensors with CRC32C, optimizer and
    scheduler state, data position, files with digests) and lists under `unknown:` what it could not
    know. With --spec the manifest embeds the spec and follows its integrity settings.

    Refuses (exit 1, writing nothing) a checkpoint whose reader finds damage, or whose pickle names a
    global off ckptspec's allow-list that the --spec does not allow by its exact name: a manifest
    would bless code that loading the file runs.
    """
    from ..adopt import AdoptionRefused, adopt

    try:
        written = adopt(path, load_spec(spec_path) if spec_path else None, force=force)
    except AdoptionRefused as refused:
        click.echo(f"error: {printable(str(refused), newlines=True)}", err=True)
        ctx.exit(EXIT_FINDINGS)
    click.echo(f"wrote {written}", err=True)
    if spec_path is None:
        click.echo(
            "note: the manifest embeds no spec; `ckptspec validate` checks what it records and warns (CKS004 spec-missing) "
            "that completeness against a declared policy is not checked until you pass --spec",
            err=True,
        )


@click.command("diff")
@click.argument("first", type=LOCATION)
@click.argument("second", type=LOCATION)
@format_option(["text", "json"], help="A readable list of the differences, or JSON.")
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
