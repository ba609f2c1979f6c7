"""Registry intake on the MLflow Model Registry: judge every checkpoint of a registered model version
against the operator's policy and record the verdict on the version.

    from mlflow import MlflowClient
    from ckptspec.registry import check_version

    verdict = check_version(MlflowClient(), "resnet", "7", spec="intake.yaml")
    verdict.status            # "passed", "failed" or "error"; also the version's `ckptspec.status` tag

Artifacts kept in a store fsspec reads (S3, GCS, Azure: the `s3`, `gcs`, `azure` extras) are
audited in place, by ranged reads, with MLflow's own S3 endpoint (`MLFLOW_S3_ENDPOINT_URL`) when set;
any other artifact store is downloaded through MLflow's artifact repositories to a private
temporary directory and audited there (a local one is copied with its symbolic links kept as links,
so that a link leading out of the artifacts is reported, not copied in).
On the version the check records tags (`ckptspec.status`, counts by severity, the digests of the
policy spec and of the manifests judged, the report's location) and the SARIF report as an artifact of
the version's run. A passed version gets the promotion alias (default `validated`); a version that does
not pass loses it. Checking the same version again gives the same tags. Needs the `registry` extra.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from ._dataclass import dataclass
from ._documents import load_spec, spec_digest
from ._exceptions import CkptspecError
from ._models import Spec
from ._storage import Location, RemotePath, location
from ._validate import audit, operator_trust
from ._result import Report, Result
from ._version import __version__
from .signing import Trust

__all__ = ["DEFAULT_ALIAS", "STATUS_TAG", "Verdict", "check_version", "parse_model_uri", "unchecked_versions", "watch"]

Status = Literal["passed", "failed", "error"]
STATUS_TAG = "ckptspec.status"
DEFAULT_ALIAS = "validated"
_TAG_PREFIX = "ckptspec."
_INTAKE_EXPERIMENT = "ckptspec-intake"
_MAX_TAG_VALUE = 5000


@dataclass(frozen=True)
class Verdict:
    """What intake decided about one model version, as recorded in its tags."""

    name: str
    version: str
    status: Status
    tags: dict[str, str]
    report: Report | None = None

    @property
    def exit_code(self) -> int:
        return {"passed": 0, "failed": 1, "error": 2}[self.status]


def parse_model_uri(uri: str) -> tuple[str, str | None, str | None]:
    """`models:/NAME/VERSION` or `models:/NAME@ALIAS` → (name, version, alias)."""
    if not uri.startswith("models:/"):
        raise CkptspecError(f"{uri}: expected models:/NAME/VERSION or models:/NAME@ALIAS")
    rest = uri[len("models:/") :].strip("/")
    if "@" in rest:
        name, _, alias = rest.rpartition("@")
        if name and alias:
            return name, None, alias
    else:
        name, _, version = rest.rpartition("/")
        if name and version.isdigit():
            return name, version, None
    raise CkptspecError(f"{uri}: expected models:/NAME/VERSION or models:/NAME@ALIAS")


def check_version(
    client: Any,
    name: str,
    version: str,
    *,
    spec: Spec | str | Path | None = None,
    trust: Trust | None = None,
    alias: str = DEFAULT_ALIAS,
    lineage: bool = True,
    **audit_options: Any,
) -> Verdict:
    """Audit every checkpoint in the artifacts of model version `name`/`version` (an `MlflowClient`'s)
    against `spec`, and record the verdict on the version. A version whose artifacts cannot be fetched,
    or hold no checkpoint, is an `error` verdict, recorded the same way. With `lineage`, artifacts
    holding several checkpoints are also judged as a run (see `ckptspec.lineage.judge_run`'s
    `upload`). `audit_options` go to `audit` (`jobs`, `executor`, `extra_checks`, `require_spec`)."""
    policy = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, policy)
    label = f"models:/{name}/{version}"
    with tempfile.TemporaryDirectory(prefix="ckptspec-intake-") as scratch:
        try:
            stored = _stored_artifacts(client, name, version)
            # A download lands in a folder named as the artifact path: paths count from its parent either way.
            root, base = (stored, stored.parent) if stored is not None else _downloaded_artifacts(client, name, version, Path(scratch))
            report = _audited(root, label, policy, trust, audit_options)
            if lineage and len(report.results) > 1:
                _add_lineage(report, root)
        except CkptspecError as exc:
            verdict = Verdict(name, str(version), "error", _error_tags(policy, str(exc)))
        else:
            tags = _tags(report, policy, base)  # reads the manifests while they are on disk
            report = _relabelled(report, str(base), label)
            verdict = Verdict(name, str(version), tags[STATUS_TAG], tags, report)  # type: ignore[arg-type]
            verdict.tags[f"{_TAG_PREFIX}report"] = _log_report(client, name, version, report, Path(scratch))
    _record(client, verdict, alias)
    return verdict


def _audited(root: Location, label: str, policy: Spec | None, trust: Trust, audit_options: Mapping[str, Any]) -> Report:
    report = audit([root], policy, trust=trust, **audit_options)
    if not report.results:
        raise CkptspecError(f"{label}: no checkpoint among its artifacts")
    return report


def _add_lineage(report: Report, root: Location) -> None:
    """The run's findings, beside each checkpoint's, whether the artifacts were downloaded or are read where they are stored."""
    from .lineage import add_lineage

    add_lineage(report, [root], upload=root)


_IN_PLACE_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
"""Artifact stores read where they are; MLflow's others (its own proxy, DBFS, HDFS, FTP) are downloaded."""


def _artifacts_uri(client: Any, name: str, version: str) -> str | None:
    """Where the version's artifacts are stored, `runs:/` resolved; None when the registry will not say."""
    try:
        source = client.get_model_version_download_uri(name, version)
        if source.startswith("runs:/"):
            run_id, _, path = source[len("runs:/") :].partition("/")
            source = f"{client.get_run(run_id).info.artifact_uri.rstrip('/')}/{path}"
    except Exception:  # noqa: BLE001 - the download path reports what the registry refuses
        return None
    return str(source)


def _stored_artifacts(client: Any, name: str, version: str) -> RemotePath | None:
    """The version's artifacts in their store, when ckptspec can read them there; else None (download)."""
    if (source := _artifacts_uri(client, name, version)) is None:
        return None
    protocol = source.partition("://")[0].lower()
    if protocol not in _IN_PLACE_PROTOCOLS:
        return None
    endpoint = os.environ.get("MLFLOW_S3_ENDPOINT_URL") if protocol in ("s3", "s3a") else None
    try:
        found = location(source, **({"endpoint_url": endpoint} if endpoint else {}))
        return found if isinstance(found, RemotePath) and found.is_dir() else None
    except CkptspecError:
        return None  # the store's fsspec package is missing, or the store refuses: MLflow's own client may not


def _downloaded_artifacts(client: Any, name: str, version: str, scratch: Path) -> tuple[Path, Path]:
    """The folder the version's artifacts were downloaded into, twice: what is audited, and what paths count from."""
    artifacts = scratch / "artifacts"
    artifacts.mkdir()
    try:
        _download(client, name, version, artifacts)
    except Exception as exc:  # noqa: BLE001 - registry and storage clients raise their own kinds; all mean "not fetched"
        raise CkptspecError(f"models:/{name}/{version}: its artifacts cannot be fetched: {type(exc).__name__}: {exc}") from None
    return artifacts, artifacts


def _download(client: Any, name: str, version: str, destination: Path) -> None:
    if (stored := _local_store(_artifacts_uri(client, name, version))) is not None:
        # MLflow's copy of a local store follows its links, taking in files from anywhere on the
        # host; copied as links, each one that leads out of the artifacts is a finding of the audit.
        shutil.copytree(stored, destination / stored.name, symlinks=True)
        return
    source = client.get_model_version_download_uri(name, version)
    if source.startswith("runs:/"):
        run_id, _, path = source[len("runs:/") :].partition("/")
        client.download_artifacts(run_id, path, str(destination))
    else:
        from mlflow.artifacts import download_artifacts

        download_artifacts(artifact_uri=source, dst_path=str(destination))


def _local_store(uri: str | None) -> Path | None:
    """The folder a `file:` artifact URI names; None for any other store."""
    parsed = urllib.parse.urlparse(uri or "")
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return Path(urllib.request.url2pathname(parsed.path))


def _relabelled(report: Report, prefix: str, label: str) -> Report:
    """The report with the scratch directory's paths written as paths under the model version's URI."""

    def swap(text: str | None) -> str | None:
        return text.replace(prefix, label) if text is not None else None

    results = []
    for result in report.results:
        findings = [
            dataclasses.replace(finding, checkpoint=swap(finding.checkpoint), file=swap(finding.file), message=swap(finding.message))
            for finding in result.findings
        ]
        results.append(
            dataclasses.replace(result, checkpoint=swap(result.checkpoint), manifest=swap(result.manifest), findings=findings)
        )
    return Report(results)


def _tags(report: Report, policy: Spec | None, root: Location) -> dict[str, str]:
    counts = {severity: sum(result.count(severity) for result in report.results) for severity in ("error", "warning", "info")}
    tags = {
        STATUS_TAG: "passed" if report.passed else "failed",
        f"{_TAG_PREFIX}checkpoints": str(len(report.results)),
        **{f"{_TAG_PREFIX}{severity}s": str(count) for severity, count in counts.items()},
        f"{_TAG_PREFIX}policy_sha256": spec_digest(policy) if policy is not None else "built-in",
        f"{_TAG_PREFIX}manifests_sha256": _manifests_digest(report.results, root),
        f"{_TAG_PREFIX}tool": f"ckptspec {__version__}",
    }
    failing = sorted({finding.code for result in report.results for finding in result.findings if finding.severity == "error"})
    tags[f"{_TAG_PREFIX}error_codes"] = ",".join(failing)[:_MAX_TAG_VALUE]
    return tags


def _error_tags(policy: Spec | None, message: str) -> dict[str, str]:
    return {
        STATUS_TAG: "error",
        f"{_TAG_PREFIX}error": message[:_MAX_TAG_VALUE],
        f"{_TAG_PREFIX}policy_sha256": spec_digest(policy) if policy is not None else "built-in",
        f"{_TAG_PREFIX}tool": f"ckptspec {__version__}",
    }


def _manifests_digest(results: list[Result], root: Location) -> str:
    """One SHA-256 over the manifests judged (in checkpoint order), so a re-upload with other manifests
    shows; the same whether the artifacts were read in place or downloaded."""
    digest = hashlib.sha256()
    for result in sorted(results, key=lambda result: result.checkpoint):
        digest.update(_relative(result.checkpoint, root).encode("utf-8", "surrogateescape") + b"\0")
        digest.update(b"no manifest" if result.manifest is None else _manifest_digest(root, result.manifest))
    return digest.hexdigest()


def _relative(path: str, root: Location) -> str:
    return "." if path == str(root) else path.removeprefix(f"{root}/")


def _manifest_digest(root: Location, manifest: str) -> bytes:
    try:
        return hashlib.sha256(root.joinpath(_relative(manifest, root)).read_bytes()).digest()
    except (OSError, CkptspecError):
        return b"unreadable manifest"


def _log_report(client: Any, name: str, version: str, report: Report, scratch: Path) -> str:
    from .report import render_sarif

    path = scratch / f"ckptspec-{name}-v{version}.sarif"
    path.write_text(render_sarif(report), encoding="utf-8")
    run_id = client.get_model_version(name, version).run_id or _intake_run(client, name, version)
    client.log_artifact(run_id, str(path), artifact_path="ckptspec")
    return f"runs:/{run_id}/ckptspec/{path.name}"


def _intake_run(client: Any, name: str, version: str) -> str:
    experiment = client.get_experiment_by_name(_INTAKE_EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(_INTAKE_EXPERIMENT)
    run = client.create_run(experiment_id, run_name=f"{name}-v{version}")
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def _record(client: Any, verdict: Verdict, alias: str) -> None:
    stale = [key for key in _current_tags(client, verdict) if key.startswith(_TAG_PREFIX) and key not in verdict.tags]
    for key in stale:
        client.delete_model_version_tag(verdict.name, verdict.version, key)
    for key, value in verdict.tags.items():
        client.set_model_version_tag(verdict.name, verdict.version, key, value)
    if verdict.status == "passed":
        client.set_registered_model_alias(verdict.name, alias, verdict.version)
    elif _alias_version(client, verdict.name, alias) == verdict.version:
        client.delete_registered_model_alias(verdict.name, alias)


def _current_tags(client: Any, verdict: Verdict) -> dict[str, str]:
    return dict(client.get_model_version(verdict.name, verdict.version).tags or {})


def _alias_version(client: Any, name: str, alias: str) -> str | None:
    aliases = client.get_registered_model(name).aliases or {}
    return str(aliases[alias]) if alias in aliases else None


# --------------------------------------------------------------------------------------------------
# Watch


def unchecked_versions(client: Any, names: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """Every (name, version) of the registry — or of the models `names` — that has no status tag yet, oldest first."""
    models = names if names else [model.name for model in client.search_registered_models()]
    for name in models:
        versions = client.search_model_versions(f"name = '{_quoted(name)}'")
        for model_version in sorted(versions, key=lambda item: int(item.version)):
            if STATUS_TAG not in (model_version.tags or {}):
                yield name, str(model_version.version)


def _quoted(name: str) -> str:
    return name.replace("'", "\\'")


def watch(
    client: Any,
    *,
    names: list[str] | None = None,
    spec: Spec | str | Path | None = None,
    trust: Trust | None = None,
    alias: str = DEFAULT_ALIAS,
    poll_seconds: float = 30.0,
    rounds: int | None = None,
    on_verdict: Callable[[Verdict], None] = lambda verdict: None,
    on_trouble: Callable[[str], None] = lambda message: None,
    **audit_options: Any,
) -> None:
    """Check every new version as it appears, forever (or for `rounds` polls). A version whose check
    fails in any way is recorded as an error and the loop goes on; a registry that stops answering is
    polled again after `poll_seconds`."""
    policy = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, policy)
    done = 0
    while rounds is None or done < rounds:
        try:
            for name, version in list(unchecked_versions(client, names)):
                on_verdict(_checked_or_error(client, name, version, policy, trust, alias, audit_options))
        except Exception as exc:  # noqa: BLE001 - a registry that is down or restarting is retried, not fatal
            on_trouble(f"the registry did not answer: {type(exc).__name__}: {exc}")
        done += 1
        if rounds is None or done < rounds:
            time.sleep(poll_seconds)


def _checked_or_error(
    client: Any, name: str, version: str, policy: Spec | None, trust: Trust, alias: str, audit_options: Mapping[str, Any]
) -> Verdict:
    try:
        return check_version(client, name, version, spec=policy, trust=trust, alias=alias, **audit_options)
    except Exception as exc:  # noqa: BLE001 - one version that trips anything is recorded, the others still checked
        verdict = Verdict(name, version, "error", _error_tags(policy, f"intake crashed: {type(exc).__name__}: {exc}"))
        _record(client, verdict, alias)
        return verdict


def default_tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else the embedded SQLite registry `mlflow.db` in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('mlflow.db').absolute()}"

