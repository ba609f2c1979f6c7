"""The run ledger reads a run where it is stored: a real torch run, resumed once with its
generators seeded again, judged from an object store as it is judged on disk, by `ckptspec
lineage`, `audit --lineage` and registry intake that reads the artifacts in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptspec import Report

from .conftest import run_cli, upload

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec.lineage import judge_run  # noqa: E402

RESEEDED = ("CKS510", "step-8.pt")
"""Where the run breaks: the first save after the resume that seeded its generators again."""


def _train(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler, position: ckpt.DataPosition, saves: int, directory: Path
) -> None:
    for _ in range(saves):
        for _ in range(2):
            model(torch.randn(2, 4)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            position.global_step += 1
            position.samples_seen += 2
        path = directory / f"step-{position.global_step}.pt"
        ckpt.save(path, model=model, optimizer=optimizer, scheduler=scheduler, data_position=position)


def _parts() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, ckpt.DataPosition]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=3), ckpt.DataPosition()


@pytest.fixture(scope="module")
def reseeded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three saves, then a new process restores the third and seeds torch as the run's start did."""
    directory = tmp_path_factory.mktemp("reseeded-run")
    parts = _parts()
    torch.manual_seed(1)  # the run's data and dropout
    _train(*parts, 3, directory)
    model, optimizer, scheduler, position = _parts()
    ckpt.restore(directory / "step-6.pt", model=model, optimizer=optimizer, scheduler=scheduler, data_position=position)
    torch.manual_seed(1)
    _train(model, optimizer, scheduler, position, 2, directory)
    return directory


def _errors(report: Report) -> set[tuple[str, str]]:
    return {(finding.code, finding.checkpoint.rpartition("/")[2]) for finding in report.findings if finding.severity == "error"}


def test_a_run_in_a_store_is_judged_as_on_disk(reseeded_run: Path) -> None:
    url = upload(sorted(reseeded_run.iterdir()), "countingmemory://runs/reseeded")
    local, stored = judge_run([reseeded_run]), judge_run([url])
    assert _errors(local.report) == _errors(stored.report) == {RESEEDED}
    assert [str(facts.checkpoint).rpartition("/runs/reseeded/")[2] for facts in stored.graph.checkpoints] == [f"step-{step}.pt" for step in (2, 4, 6, 8, 10)]
    assert len(stored.graph.links) == 4 and not any(link.inferred for link in stored.graph.links)  # every parent found in the store


def test_lineage_and_audit_lineage_take_a_url(reseeded_run: Path) -> None:
    url = upload(sorted(reseeded_run.iterdir()), "countingmemory://runs/by-the-cli")
    code, out, _ = run_cli("lineage", url)
    assert code == 1 and "CKS510" in out and "runs/by-the-cli/step-8.pt" in out
    code, out, _ = run_cli("audit", "--lineage", "--format", "json", url)
    assert code == 1 and '"CKS510"' in out


mlflow = pytest.importorskip("mlflow")


def test_intake_reading_the_store_in_place_judges_the_run(reseeded_run: Path, s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    from ckptspec import registry

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", fsspec.config.conf["s3"]["endpoint_url"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(client.create_experiment("stored-run", artifact_location=f"{s3}/run-lineage"))
    client.log_artifacts(run.info.run_id, str(reseeded_run), artifact_path="checkpoints")
    client.create_registered_model("resumed")
    version = client.create_model_version("resumed", f"runs:/{run.info.run_id}/checkpoints", run_id=run.info.run_id).version

    def no_download(*_args: object) -> None:
        raise AssertionError("the artifacts were downloaded")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "_download", no_download)
        in_place = registry.check_version(client, "resumed", version)
    assert in_place.status == "failed"
    assert in_place.report is not None and _errors(in_place.report) == {RESEEDED}

    monkeypatch.setattr(registry, "_stored_artifacts", lambda *_args: None)
    downloaded = registry.check_version(client, "resumed", version)
    assert downloaded.tags == in_place.tags


def test_an_upload_whose_manifest_names_a_parent_outside_it_reads_nothing_there(reseeded_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest is the uploader's: a parent it names outside the upload (`../../etc/...`) is
    not looked for, so no file outside the upload is opened to digest it."""
    import shutil

    import yaml

    from ckptspec.lineage import _graph

    upload_dir = tmp_path / "upload"
    shutil.copytree(reseeded_run, upload_dir)
    manifest = upload_dir / "step-4.pt.ckptspec.yaml"
    document = yaml.safe_load(manifest.read_text())
    document["lineage"]["parent"].update(checkpoint="../../../../../../etc/passwd", state_sha256="0" * 64)
    manifest.write_text(yaml.safe_dump(document))
    opened: list[str] = []
    real = _graph.read_document_bytes
    monkeypatch.setattr(_graph, "read_document_bytes", lambda path: opened.append(str(path)) or real(path))
    judge_run([upload_dir], upload=upload_dir)
    assert [path for path in opened if not path.startswith(str(upload_dir))] == []
