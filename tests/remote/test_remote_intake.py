"""Registry intake reads a version's artifacts where they are stored (S3 here), without downloading
them, and records the same verdict and tags as when it downloads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Written

mlflow = pytest.importorskip("mlflow")

from ckptspec import registry  # noqa: E402


@pytest.fixture
def s3_registry(s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> mlflow.MlflowClient:
    """A SQLite registry whose runs keep their artifacts in the moto bucket, reached as MLflow reaches it."""
    import fsspec

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", fsspec.config.conf["s3"]["endpoint_url"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_experiment("stored", artifact_location=f"{s3}/mlflow")
    return client


def _register(client: mlflow.MlflowClient, name: str, checkpoint: Written, directory: Path) -> str:
    checkpoint.copy_to(directory)
    run = client.create_run(client.get_experiment_by_name("stored").experiment_id)
    client.log_artifacts(run.info.run_id, str(directory), artifact_path="checkpoints")
    client.create_registered_model(name)
    return str(client.create_model_version(name, f"runs:/{run.info.run_id}/checkpoints", run_id=run.info.run_id).version)


def test_artifacts_in_s3_are_judged_in_place_with_the_tags_a_download_gives(
    s3_registry: mlflow.MlflowClient, written: dict[str, Written], lightning_spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = _register(s3_registry, "in-place", written["lightning"], tmp_path / "upload")

    def no_download(*_args: object) -> None:
        raise AssertionError("the artifacts were downloaded")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "_download", no_download)
        in_place = registry.check_version(s3_registry, "in-place", version, spec=lightning_spec)
    assert in_place.status == "passed", [finding.message for finding in in_place.report.findings]  # type: ignore[union-attr]
    assert in_place.report.results[0].checkpoint.startswith(f"models:/in-place/{version}/")  # type: ignore[union-attr]

    monkeypatch.setattr(registry, "_stored_artifacts", lambda *_args: None)
    downloaded = registry.check_version(s3_registry, "in-place", version, spec=lightning_spec)
    assert downloaded.tags == in_place.tags
