"""`ckptspec lineage`: whether a run's checkpoints are one unbroken run."""

from __future__ import annotations

from pathlib import Path

import click

from .._atomic import write_output
from .._exceptions import WriteError
from .._storage import Location
from ..report import REPORTER_BY_NAME
from ._group import LOCATION, format_option

__all__ = ["COMMANDS"]


@click.command("lineage")
@click.argument("paths", nargs=-1, required=True, type=LOCATION)
@click.option("--follow-symlinks", is_flag=True, help="Search directories behind symbolic links too.")
@format_option(
    ["text", *sorted({*REPORTER_BY_NAME, "html"} - {"text"})],
    help="How to write the report: for people (text, markdown; html: one page with the run's graph and a timeline "
    "per counter, needs the html extra) or for tools (json, junit, sarif).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here instead of stdout.")
@click.pass_context
def lineage_command(ctx: click.Context, paths: tuple[Location, ...], follow_symlinks: bool, output_format: str, output: Path | None) -> None:
    """Check that the checkpoints under PATHS are unbroken runs: each one's parent there and
    unchanged, no undeclared fork or rollback, and every counter (global step, optimizer and
    scheduler steps, data position, gradient scaler, random generators) continuing from its parent.

    Checkpoints are read from their manifests; one without a manifest is read as `ckptspec manifest`
    would adopt it (its parent is then inferred). Exit 0 when no finding is an error, 1 when any
    is, 2 when nothing under PATHS is a checkpoint.
    """
    from ..lineage import judge_run

    judgement = judge_run(paths, follow_symlinks=follow_symlinks)
    if not judgement.report.results:
        raise click.UsageError(f"no checkpoints found under {', '.join(map(str, paths))}")
    judged = {Path(result.checkpoint) for result in judgement.report.results}
    if output is not None and any(output.resolve() in (path, Path(f"{path}.ckptspec.yaml")) for path in judged):
        raise WriteError(f"{output}: is a checkpoint or manifest judged; refusing to overwrite an input with the report (choose another --output)")
    if output_format == "html":
        from ..lineage._html import render_html

        text = render_html(judgement)
    else:
        text = REPORTER_BY_NAME[output_format](judgement.report)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_output(output, text.encode("utf-8", "backslashreplace"))
        click.echo(f"wrote {output}", err=True)
    ctx.exit(judgement.exit_code)


COMMANDS = (lineage_command,)
