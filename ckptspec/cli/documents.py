"""Commands about the documents themselves: `init`, `lint`, `schema`."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import click

from .._atomic import atomic_write_bytes, write_output
from .._documents import load_document
from .._printable import printable
from .._exceptions import DocumentError, Issue, SchemaValidationError, UnsupportedVersionError, YAMLSyntaxError
from .._jsonschema import KINDS, markdown_reference, published_path, schema_text
from .._exit import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE
from ._group import INPUT_PATH, format_option

__all__ = ["COMMANDS"]

FRAMEWORKS = ("torch", "lightning", "tensorflow")


def starter_spec(name: str, framework: str) -> str:
    template = resources.files("ckptspec").joinpath("templates/spec.yaml").read_text(encoding="utf-8")
    # The generators every run of the framework has; a TensorFlow run owns tf.random.Generators only if it makes them.
    rng = "[python, numpy]" if framework == "tensorflow" else "[python, numpy, torch]"
    return template.format(name=name, framework=framework, rng_generators=rng)


@click.command("init")
@click.option("--name", default="my-model", show_default=True, help="Project or model family the spec is for.")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default="lightning", show_default=True)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout."
)
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def init_command(name: str, framework: str, output: Path | None, force: bool) -> None:
    """Write a commented starter spec to stdout (or --output)."""
    text = starter_spec(name, framework)
    if output is None:
        click.echo(text, nl=False)
        return
    if output.exists() and not force:
        raise click.UsageError(f"{output} exists; pass --force to overwrite it")
    write_output(output, text.encode("utf-8"))
    click.echo(f"wrote {output}", err=True)


@click.command("lint")
@click.argument("files", nargs=-1, required=True, type=INPUT_PATH)
@format_option(["text", "json"], help="One line per file, or a JSON object listing every file's status and errors.")
@click.pass_context
def lint_command(ctx: click.Context, files: tuple[Path, ...], output_format: str) -> None:
    """Validate spec and manifest files against the schema.

    Exit 0 when every file is valid, 1 when any breaks the schema, 2 when a file cannot be read.
    """
    results = [_lint_one(path) for path in files]
    if output_format == "json":
        click.echo(json.dumps({"files": results}, indent=2))
    else:
        for result in results:
            _echo_lint(result)
    statuses = {result["status"] for result in results}
    ctx.exit(EXIT_UNUSABLE if "unreadable" in statuses else EXIT_FINDINGS if "invalid" in statuses else EXIT_CLEAN)


def _lint_one(path: Path) -> dict[str, object]:
    try:
        document = load_document(path)
    except SchemaValidationError as exc:
        return {
            "file": str(path),
            "status": "invalid",
            "errors": [issue.render(path) for issue in sorted(exc.issues, key=_place_in_file)],
        }
    except (YAMLSyntaxError, UnsupportedVersionError) as exc:
        return {"file": str(path), "status": "invalid", "errors": [str(exc)]}
    except DocumentError as exc:
        # Any other document error is about getting at the file, not about what it says.
        return {"file": str(path), "status": "unreadable", "errors": [str(exc)]}
    return {"file": str(path), "status": "ok", "kind": document.kind, "errors": []}


def _place_in_file(issue: Issue) -> tuple[int, int]:
    """Line order; problems without a place in the file (a missing key) come first."""
    return (issue.line or 0, issue.column or 0)


def _echo_lint(result: dict[str, object]) -> None:
    if result["status"] == "ok":
        click.echo(printable(f"{result['file']}: ok ({result['kind']})"))
        return
    for error in result["errors"]:  # type: ignore[attr-defined]
        click.echo(printable(str(error), newlines=True), err=result["status"] == "unreadable")


@click.command("schema")
@click.option("--kind", type=click.Choice(KINDS), default="spec", show_default=True, help="Which schema to print.")
@format_option(["json", "markdown"], help="JSON Schema, or a Markdown reference page.")
@click.option(
    "--check",
    is_flag=True,
    help="Compare the published schema files in --dir (a source checkout's) with the models; exit 1 if they differ.",
)
@click.option("--write", is_flag=True, help="Regenerate the published schema files from the models.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("schema"),
    show_default=True,
    help="Where the published schema files live.",
)
@click.pass_context
def schema_command(
    ctx: click.Context, kind: str, output_format: str, check: bool, write: bool, directory: Path
) -> None:
    """Print, check or regenerate the published JSON Schemas."""
    if check and write:
        raise click.UsageError("--check and --write exclude each other")
    if write:
        directory.mkdir(parents=True, exist_ok=True)
        for each in KINDS:
            atomic_write_bytes(published_path(directory, each), schema_text(each).encode("utf-8"))
            click.echo(f"wrote {published_path(directory, each)}", err=True)
        return
    if check:
        ctx.exit(_check_published(directory))
    click.echo(schema_text(kind) if output_format == "json" else markdown_reference(kind), nl=False)


def _check_published(directory: Path) -> int:
    """Compare each published schema file in `directory` with the models, saying which and how."""
    paths = [published_path(directory, kind) for kind in KINDS]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        click.echo(
            f"error: {', '.join(map(str, missing))}: no such file; --check compares the schema files a source "
            "checkout publishes with this ckptspec's models: run it at the checkout's root, or pass --dir",
            err=True,
        )
        return EXIT_UNUSABLE
    stale = False
    for kind, path in zip(KINDS, paths):
        try:
            matches = path.read_text(encoding="utf-8") == schema_text(kind)
        except (OSError, UnicodeDecodeError) as exc:
            click.echo(f"error: {path}: cannot read: {exc}", err=True)
            return EXIT_UNUSABLE
        stale = stale or not matches
        verdict = "matches the models" if matches else "differs from the models; run `ckptspec schema --write`"
        click.echo(f"{path}: {verdict}", err=True)
    return EXIT_FINDINGS if stale else EXIT_CLEAN


COMMANDS = (init_command, lint_command, schema_command)
