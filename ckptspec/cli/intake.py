"""`ckptspec intake`: judge registered model versions at registry intake and record the verdicts (MLflow)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .._documents import load_spec
from .._exit import EXIT_CLEAN
from .._printable import printable
from .._result import Executor
from ..report import REPORTER_BY_NAME
from ._enforcing import extra_checks, trust
from ._group import INPUT_PATH, format_option
from .validate import (
    _executor_option,
    _replay_option,
    _require_signature_option,
    _require_spec_option,
    _trusted_certificate_option,
    _trusted_key_option,
)

__all__ = ["COMMANDS"]


@click.command("intake")
@click.argument("models", nargs=-1, metavar="[MODEL_URI]...")
@click.option(
    "--tracking-uri",
    envvar="MLFLOW_TRACKING_URI",
    show_envvar=True,
    help="The MLflow tracking server or store; default: the embedded registry sqlite:///mlflow.db here.",
)
@click.option("--registry-uri", envvar="MLFLOW_REGISTRY_URI", show_envvar=True, help="The model registry, when not the tracking URI.")
@click.option("--spec", "spec_path", type=INPUT_PATH, help="The operator's policy spec every checkpoint is judged against.")
@_trusted_key_option
@_trusted_certificate_option
@_require_signature_option
@_require_spec_option
@_replay_option
@click.option("--alias", default="validated", show_default=True, help="Promotion alias set on a version that passes, removed from one that does not.")
@click.option(
    "--lineage/--no-lineage",
    default=True,
    show_default=True,
    help="Judge a version holding several checkpoints as a run, too (the rules of `ckptspec lineage`).",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Checkpoints checked in parallel (processes).")
@_executor_option
@click.option("--watch", is_flag=True, help="Keep checking versions that have no verdict yet, as they are registered.")
@click.option("--once", is_flag=True, help="Check every version that has no verdict yet, then stop.")
@click.option("--model", "model_names", multiple=True, help="With --watch/--once: only these registered models; repeatable.")
@click.option("--poll", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds between polls with --watch.")
@format_option(["text", *sorted(set(REPORTER_BY_NAME) - {"text"})], help="How to write each version's report on stdout.")
@click.pass_context
def intake_command(
    ctx: click.Context,
    models: tuple[str, ...],
    tracking_uri: str | None,
    registry_uri: str | None,
    spec_path: Path | None,
    trusted_keys: tuple[Path, ...],
    trusted_certificates: tuple[Path, ...],
    require_signature: bool,
    require_spec: bool,
    replay: bool,
    alias: str,
    lineage: bool,
    jobs: int,
    executor: Executor | None,
    watch: bool,
    once: bool,
    model_names: tuple[str, ...],
    poll: float,
    output_format: str,
) -> None:
    """Check registered model versions (models:/NAME/VERSION or models:/NAME@ALIAS): download their
    artifacts, validate every checkpoint among them against the policy, and record the verdict on the
    version — tags `ckptspec.status` (passed, failed, error), counts, digests, and the SARIF report as
    an artifact of the version's run. A passing version gets the promotion --alias; a failing one
    loses it. Re-running on the same version gives the same tags.

    With --watch (or --once) it checks every version that has no verdict yet; a version that cannot be
    checked is recorded as an error and the others go on. Needs the `registry` extra.
    Exit 0 all passed, 1 any failed, 2 any could not be checked.
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # stderr carries one line per verdict
    from mlflow import MlflowClient

    from ..registry import check_version, default_tracking_uri, parse_model_uri, watch as watch_registry

    if bool(models) == (watch or once):
        raise click.UsageError("give MODEL_URIs, or --watch/--once to check new versions")
    tracking = tracking_uri or default_tracking_uri()
    client = MlflowClient(tracking_uri=tracking, registry_uri=registry_uri or tracking)
    spec = load_spec(spec_path) if spec_path else None
    operator = trust(spec_path, spec, trusted_keys, trusted_certificates, require_signature)
    audit_options = {"jobs": jobs, "executor": executor, "require_spec": require_spec, "extra_checks": extra_checks(replay), "lineage": lineage}
    worst = EXIT_CLEAN

    def show(verdict: object) -> None:
        nonlocal worst
        worst = max(worst, verdict.exit_code)  # type: ignore[attr-defined]
        if verdict.report is not None:  # type: ignore[attr-defined]
            click.echo(REPORTER_BY_NAME[output_format](verdict.report), nl=False)  # type: ignore[attr-defined]
        tags = verdict.tags  # type: ignore[attr-defined]
        reason = f" ({tags['ckptspec.error']})" if "ckptspec.error" in tags else ""
        click.echo(printable(f"models:/{verdict.name}/{verdict.version}: {verdict.status}{reason}"), err=True)  # type: ignore[attr-defined]

    if models:
        for uri in models:
            name, version, by_alias = parse_model_uri(uri)
            if version is None:
                version = str(client.get_model_version_by_alias(name, by_alias).version)
            show(check_version(client, name, version, spec=spec, trust=operator, alias=alias, **audit_options))
    else:
        watch_registry(
            client, names=list(model_names) or None, spec=spec, trust=operator, alias=alias, **audit_options,
            poll_seconds=poll, rounds=1 if once else None, on_verdict=show,
            on_trouble=lambda message: click.echo(f"warning: {printable(message)}", err=True),
        )  # fmt: skip
    ctx.exit(worst)


COMMANDS = (intake_command,)
