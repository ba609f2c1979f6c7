"""Registry intake on a real MLflow Model Registry (SQLite store) whose artifacts live on local disk
and in a real S3 API server on 127.0.0.1 (moto): verdicts recorded as tags, the promotion alias set
and removed, the SARIF report logged, the watch loop, and the command line."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import copy_checkpoint, run_cli

pytest.importorskip("mlflow")
torch = pytest.importorskip("torch")

from mlflow import MlflowClient  # noqa: E402

from ckptspec.registry import STATUS_TAG, check_version, parse_model_uri, watch  # noqa: E402
from ckptspec.replay import replay_check  # noqa: E402

from .test_replay import exported_run  # noqa: E402, F401 - the signed, exported Lightning run as a fixture
from ..lineage.test_torch_runs import MID_RUN, _resumed, _scheduler_built_after_restore, first_half  # noqa: E402, F401 - a run's first half as a fixture

_BUCKET = "intake-artifacts"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 API server, bound to 127.0.0.1, with one bucket; the AWS environment points at it."""
    moto_server = pytest.importorskip("moto.server")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {key: os.environ.get(key) for key in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(
        MLFLOW_S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=_BUCKET)
    yield endpoint
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> tuple[MlflowClient, str]:
    """A fresh SQLite-backed registry (the embedded default) and its URI."""
    directory = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_experiment("local", artifact_location=(directory / "artifacts").as_uri())
    return client, uri


def _register(client: MlflowClient, name: str, files: Path, experiment: str = "local") -> str:
    """Log `files` as a run's artifacts and register them as a new version of `name`."""
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    run = client.create_run(experiment_id)
    client.log_artifacts(run.info.run_id, str(files), artifact_path="checkpoints")
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    return str(client.create_model_version(name, f"runs:/{run.info.run_id}/checkpoints", run_id=run.info.run_id).version)


def _tags(client: MlflowClient, name: str, version: str) -> dict[str, str]:
    return {key: value for key, value in client.get_model_version(name, version).tags.items() if key.startswith("ckptspec.")}


def _alias(client: MlflowClient, name: str, alias: str = "validated") -> str | None:
    aliases = client.get_registered_model(name).aliases
    return str(aliases[alias]) if alias in aliases else None


def test_clean_version_passes_gets_the_alias_and_a_report(registry, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, _ = registry
    copy_checkpoint(lightning_checkpoint, tmp_path / "clean")
    version = _register(client, "clean-model", tmp_path / "clean")
    verdict = check_version(client, "clean-model", version, spec=specs["lightning"])
    assert verdict.status == "passed", [finding.message for finding in verdict.report.findings]
    tags = _tags(client, "clean-model", version)
    assert tags[STATUS_TAG] == "passed" and tags["ckptspec.errors"] == "0" and tags["ckptspec.checkpoints"] == "1"
    assert len(tags["ckptspec.policy_sha256"]) == 64 and len(tags["ckptspec.manifests_sha256"]) == 64
    assert _alias(client, "clean-model") == version
    report_uri = tags["ckptspec.report"]
    run_id, _, artifact = report_uri[len("runs:/") :].partition("/")
    sarif = json.loads(Path(client.download_artifacts(run_id, artifact, str(tmp_path / "report"))).read_text())
    assert sarif["version"] == "2.1.0"
    assert all("models:/clean-model/" in result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
               for run in sarif["runs"] for result in run["results"])  # fmt: skip

    again = check_version(client, "clean-model", version, spec=specs["lightning"])
    assert _tags(client, "clean-model", version) == tags and again.status == "passed"  # idempotent


def test_tampered_checkpoint_fails_and_loses_the_alias(registry, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, _ = registry
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "good")
    good = _register(client, "tamper-model", tmp_path / "good")
    assert check_version(client, "tamper-model", good, spec=specs["lightning"]).status == "passed"
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0x01
    checkpoint.write_bytes(bytes(data))
    bad = _register(client, "tamper-model", tmp_path / "good")
    assert check_version(client, "tamper-model", bad, spec=specs["lightning"]).status == "failed"
    assert _alias(client, "tamper-model") == good  # the alias stays on the version that passed
    client.set_registered_model_alias("tamper-model", "validated", bad)
    verdict = check_version(client, "tamper-model", bad, spec=specs["lightning"])
    assert verdict.status == "failed" and _alias(client, "tamper-model") is None
    assert _tags(client, "tamper-model", bad)["ckptspec.error_codes"]


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("true",)


def test_dangerous_pickle_and_missing_manifest_fail(registry, specs, tmp_path: Path) -> None:
    client, _ = registry
    upload = tmp_path / "upload"
    upload.mkdir()
    torch.save({"state_dict": {"w": torch.ones(2)}, "hook": _Payload()}, upload / "model.ckpt")  # torch.save runs nothing
    version = _register(client, "upload-model", upload)
    verdict = check_version(client, "upload-model", version, spec=specs["lightning"])
    codes = _tags(client, "upload-model", version)["ckptspec.error_codes"].split(",")
    assert verdict.status == "failed" and "CKS401" in codes and "CKS002" in codes


def test_unfetchable_artifacts_are_an_error_verdict(registry, specs) -> None:
    client, _ = registry
    client.create_registered_model("ghost-model")
    version = str(client.create_model_version("ghost-model", "file:///nonexistent/ckptspec/artifacts").version)
    verdict = check_version(client, "ghost-model", version, spec=specs["lightning"])
    assert verdict.status == "error" and verdict.exit_code == 2
    assert "cannot be fetched" in _tags(client, "ghost-model", version)["ckptspec.error"]


def test_artifacts_in_s3(registry, s3_endpoint: str, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, _ = registry
    client.create_experiment("s3", artifact_location=f"s3://{_BUCKET}/experiments")
    copy_checkpoint(lightning_checkpoint, tmp_path / "s3")
    version = _register(client, "s3-model", tmp_path / "s3", experiment="s3")
    assert client.get_model_version_download_uri("s3-model", version).startswith("runs:/")
    verdict = check_version(client, "s3-model", version, spec=specs["lightning"])
    assert verdict.status == "passed", [finding.message for finding in verdict.report.findings]
    assert _alias(client, "s3-model") == version


def test_watch_checks_each_new_version_once_and_survives_a_crashing_one(registry, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, _ = registry
    copy_checkpoint(lightning_checkpoint, tmp_path / "w")
    first = _register(client, "watched-model", tmp_path / "w")
    second = str(client.create_model_version("watched-model", "file:///nonexistent/ckptspec/watched").version)
    seen: list[tuple[str, str]] = []
    watch(client, names=["watched-model"], spec=specs["lightning"], poll_seconds=0.1, rounds=2,
          on_verdict=lambda verdict: seen.append((verdict.version, verdict.status)))  # fmt: skip
    assert seen == [(first, "passed"), (second, "error")]  # the second round found nothing new


def test_command_line_intake(registry, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, uri = registry
    copy_checkpoint(lightning_checkpoint, tmp_path / "cli")
    version = _register(client, "cli-model", tmp_path / "cli")
    code, out, err = run_cli("intake", f"models:/cli-model/{version}", "--tracking-uri", uri, "--spec", specs["lightning"], "--format", "json")
    assert code == 0, err
    assert f"models:/cli-model/{version}: passed" in err and json.loads(out)["results"]
    code, _, err = run_cli("intake", "models:/cli-model@validated", "--tracking-uri", uri, "--spec", specs["lightning"])
    assert code == 0, err
    code, _, err = run_cli("intake", "--once", "--model", "cli-model", "--tracking-uri", uri)
    assert code == 0 and "passed" not in err  # nothing left without a verdict
    code, _, err = run_cli("intake", "models:/cli-model", "--tracking-uri", uri)
    assert code == 2 and "expected models:/NAME/VERSION" in err


def test_model_uris() -> None:
    assert parse_model_uri("models:/a/b/3") == ("a/b", "3", None)
    assert parse_model_uri("models:/resnet@champion") == ("resnet", None, "champion")



def test_intake_verifies_the_signature_and_replays_the_fingerprint(registry, exported_run, tmp_path: Path) -> None:
    """A signed Lightning checkpoint with its exported program: intake trusts only the operator's key,
    and replays the fixed batch through the program with no training code on the path."""
    import shutil

    from ckptspec.signing import Trust

    client, _ = registry
    checkpoint, public = exported_run
    upload = tmp_path / "upload"
    upload.mkdir()
    for suffix in ("", ".ckptspec.yaml", ".pt2", ".sig"):
        shutil.copy2(f"{checkpoint}{suffix}", upload / f"{checkpoint.name}{suffix}")
    version = _register(client, "signed-model", upload)
    trust = Trust(keys=(public,), required=True)
    verdict = check_version(client, "signed-model", version, trust=trust, extra_checks=[replay_check])
    assert verdict.status == "passed", [finding.message for finding in verdict.report.findings]
    codes = {finding.code for finding in verdict.report.findings}
    assert not codes & {"CKS250", "CKS251", "CKS252", "CKS253", "CKS254", "CKS336", "CKS337", "CKS338"}, codes

    (upload / f"{checkpoint.name}.sig").unlink()
    unsigned = _register(client, "signed-model", upload)
    verdict = check_version(client, "signed-model", unsigned, trust=trust, extra_checks=[replay_check])
    assert verdict.status == "failed" and "CKS250" in _tags(client, "signed-model", unsigned)["ckptspec.error_codes"]


def test_a_link_in_the_store_out_of_the_artifacts_is_reported_not_taken_in(registry, lightning_checkpoint: Path, specs, tmp_path: Path) -> None:
    client, _ = registry
    copy_checkpoint(lightning_checkpoint, tmp_path / "clean")
    version = _register(client, "linked-model", tmp_path / "clean")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch.save({"state_dict": {"w": torch.ones(2)}, "hook": _Payload()}, elsewhere / "other.ckpt")  # torch.save runs nothing
    run_id = client.get_model_version("linked-model", version).run_id
    stored = Path(client.get_run(run_id).info.artifact_uri.removeprefix("file://")) / "checkpoints"
    (stored / "shared").symlink_to(elsewhere)  # planted in the store, after the upload
    # Before: MLflow's own download refuses the version, naming neither the link nor where it leads.
    from mlflow.exceptions import MlflowException

    (tmp_path / "mlflow-copy").mkdir()
    with pytest.raises(MlflowException) as refused:
        client.download_artifacts(run_id, "checkpoints", str(tmp_path / "mlflow-copy"))
    assert "shared" not in str(refused.value) and str(elsewhere) not in str(refused.value)

    verdict = check_version(client, "linked-model", version, spec=specs["lightning"])
    codes = _tags(client, "linked-model", version)["ckptspec.error_codes"].split(",")
    assert verdict.status == "failed" and codes == ["CKS404"], codes
    (escape,) = [finding for finding in verdict.report.findings if finding.code == "CKS404"]
    assert "shared" in escape.message and str(elsewhere) in escape.message


def test_a_version_holding_a_run_is_judged_as_a_run(registry, first_half: Path, tmp_path: Path) -> None:
    client, _ = registry
    _resumed(first_half, tmp_path / "clean")
    _resumed(first_half, tmp_path / "broken", _scheduler_built_after_restore, after_saves=MID_RUN)
    clean = _register(client, "run-model", tmp_path / "clean")
    broken = _register(client, "run-model", tmp_path / "broken")
    assert check_version(client, "run-model", clean).status == "passed"
    # Each checkpoint of the broken run is sound on its own; only the run shows the restarted scheduler.
    assert check_version(client, "run-model", broken, lineage=False).status == "passed"
    verdict = check_version(client, "run-model", broken)
    assert verdict.status == "failed"
    assert _tags(client, "run-model", broken)["ckptspec.error_codes"] == "CKS507"
    (finding,) = [finding for finding in verdict.report.findings if finding.severity == "error"]
    assert finding.checkpoint == f"models:/run-model/{broken}/checkpoints/step-10.pt"
