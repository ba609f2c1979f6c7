"""What `ckptspec validate` and `audit` do, without click (`_direct` runs them too)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._atomic import write_output
from .._discover import discover, judged_files
from .._documents import read_spec
from .._exceptions import WriteError
from .._result import Executor, Report, Result
from .._storage import Location, RemotePath, location
from .._validate import ExtraCheck, audit, operator_trust, validate
from ..checks.paths import FileSkipped
from ..report import REPORTER_BY_NAME
from ..signing import Trust
from ._console import UsageProblem, echo

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._models import Spec

__all__ = ["extra_checks", "run_audit", "run_validate", "trust"]


def run_validate(
    path: Location,
    spec_path: Location | None,
    require_spec: bool,
    trusted_keys: tuple[Path, ...],
    trusted_certificates: tuple[Path, ...],
    require_signature: bool,
    replay: bool,
    output_format: str,
    output: Path | None,
) -> int:
    spec = read_spec(spec_path) if spec_path else None
    operator = trust(spec_path, spec, trusted_keys, trusted_certificates, require_signature)
    result = validate(path, spec, trust=operator, extra_checks=extra_checks(replay), require_spec=require_spec)
    _refuse_to_overwrite_inputs(output, lambda: {**judged_files([location(result.checkpoint)]), **_spec_input(spec_path)})
    _emit(REPORTER_BY_NAME[output_format](Report([result])), output)
    return result.exit_code


def run_audit(
    paths: tuple[Location, ...],
    spec_path: Location | None,
    require_spec: bool,
    trusted_keys: tuple[Path, ...],
    trusted_certificates: tuple[Path, ...],
    require_signature: bool,
    replay: bool,
    jobs: int,
    executor: Executor | None,
    follow_symlinks: bool,
    lineage: bool,
    output_format: str,
    output: Path | None,
) -> int:
    spec = read_spec(spec_path) if spec_path else None
    found = discover(paths, follow_symlinks=follow_symlinks)
    if not found.checkpoints and all(place.rule is FileSkipped for place in found.not_judged):
        skipped = f" ({len(found.not_judged)} other files, none a checkpoint)" if found.not_judged else ""
        raise UsageProblem(f"no checkpoints found under {', '.join(map(str, paths))}{skipped}")
    _refuse_to_overwrite_inputs(output, lambda: {**judged_files(found.checkpoints), **_spec_input(spec_path)})
    operator = trust(spec_path, spec, trusted_keys, trusted_certificates, require_signature)
    options = {"jobs": jobs, "trust": operator, "executor": executor, "require_spec": require_spec, "extra_checks": extra_checks(replay), "discovery": found}
    report = _audit_with_progress(paths, spec, options, len(found.checkpoints))
    if lineage:
        from ..lineage import add_lineage

        add_lineage(report, paths, follow_symlinks=follow_symlinks)
    _emit(REPORTER_BY_NAME[output_format](report), output)
    return report.exit_code


def trust(
    spec_path: Location | None, spec: object, keys: tuple[Path, ...], certificates: tuple[Path, ...], required: bool
) -> Trust:
    """The operator's trust: the given spec's `signature:` and the command line's signers."""
    return operator_trust(spec_path, spec).joined(Trust(keys, certificates, required))  # type: ignore[arg-type]


def extra_checks(replay: bool) -> list[ExtraCheck]:
    """The checks beyond the rule families the options ask for: `--replay` runs the fixed batch (torch)."""
    if not replay:
        return []
    from ..replay import replay_check

    return [replay_check]


def _refuse_to_overwrite_inputs(output: Path | None, inputs: Callable[[], dict[Location, str]]) -> None:
    """Raise `WriteError` when the report would replace a file the run judges (a CI re-run may
    still replace its previous report). The files are listed only for an output that is a regular
    file already: listing them costs a few system calls a checkpoint."""
    if output is None:
        return
    try:
        target = os.stat(output)
    except OSError:
        return  # nothing there yet: the report cannot replace an input
    if not stat.S_ISREG(target.st_mode):
        return  # a terminal, a pipe, /dev/null: written into as it is, and no checkpoint's file
    for path, what in inputs().items():
        if _is_file(path, target):
            raise WriteError(f"{output}: is {what}; refusing to overwrite an input with the report (choose another --output)")


def _is_file(path: Location, target: os.stat_result) -> bool:
    """Whether local `path` is the file `target` describes, under whatever name or link (one `stat`)."""
    if isinstance(path, RemotePath):
        return False  # the report is written locally
    try:
        status = os.stat(path)
    except OSError:
        return False
    return (status.st_dev, status.st_ino) == (target.st_dev, target.st_ino)


def _spec_input(spec_path: Location | None) -> dict[Location, str]:
    return {spec_path: "the spec"} if spec_path is not None else {}


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        echo(text, nl=False)
    else:
        write_output(output, text.encode("utf-8", "backslashreplace"))
        echo(f"wrote {output}", err=True)


def _audit_with_progress(paths: tuple[Location, ...], spec: Spec | None, options: dict[str, Any], total: int) -> Report:
    """`audit(paths, spec, **options)`, with a progress bar on a terminal."""
    if not sys.stderr.isatty():
        return audit(paths, spec, **options)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("audit", total=total)

        def advance(_result: Result) -> None:
            progress.advance(task)

        return audit(paths, spec, on_result=advance, **options)
