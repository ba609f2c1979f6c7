"""Checkpoints read from fsspec stores give the reports they give on a local disk, fetching only the
ranges they need."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptspec import load_manifest
from ckptspec._storage import location
from ckptspec.formats._zip_records import ZipArchive

from .._payloads import SystemCall
from .conftest import CountingMemoryFileSystem, Written, fsspec, run_cli, torch, upload

KINDS = ["lightning", "torch", "legacy", "safetensors", "safetensors-sharded", "tf", "keras", "keras-weights", "dcp", "torch-exported"]


def _placed(text: str, base: str) -> str:
    """The report with the directory (or prefix) the checkpoint was read from replaced by one name."""
    return text.replace(base.rstrip("/"), "<BASE>")


def _both(command: str, local: Path, prefix: str, *options: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """`command` on the local checkpoint and on its copy under `prefix`, outputs with their bases named alike."""
    code, out, err = run_cli(command, local, *options)
    assert code in (0, 1), err
    remote_code, remote_out, remote_err = run_cli(command, f"{prefix}/{local.name}", *options)
    assert remote_code in (0, 1), remote_err
    return (code, _placed(out, str(local.parent))), (remote_code, _placed(remote_out, str(location(prefix))))


@pytest.mark.parametrize("kind", KINDS)
def test_memory_store_gives_the_local_inspection_and_verdict(written: dict[str, Written], kind: str) -> None:
    checkpoint = written[kind]
    prefix = checkpoint.upload(f"memory://same-as-local/{kind}")
    local, remote = _both("inspect", checkpoint.path, prefix, "--format", "json", "--tensors")
    assert remote == local
    local, remote = _both("validate", checkpoint.path, prefix, "--format", "json")
    assert remote == local
    assert json.loads(local[1])["passed"], local[1]


@pytest.mark.parametrize("kind", ["lightning", "safetensors-sharded", "tf", "keras", "dcp"])
def test_s3_gives_the_local_verdict(written: dict[str, Written], s3: str, kind: str) -> None:
    checkpoint = written[kind]
    prefix = checkpoint.upload(f"{s3}/same-as-local/{kind}")
    local, remote = _both("validate", checkpoint.path, prefix, "--format", "json")
    assert remote == local  # the manifest found is the one under the prefix: its path reads <BASE>/...
    assert json.loads(remote[1])["results"][0]["manifest"].startswith("<BASE>/")


def _audit_rows(report: str, base: str) -> list[tuple[str, str | None, list[str]]]:
    results = json.loads(_placed(report, base))["results"]
    return [(result["checkpoint"], result["format"], sorted(f["code"] for f in result["findings"])) for result in results]


def test_audit_of_a_bucket_prefix_finds_and_judges_what_a_directory_audit_does(
    written: dict[str, Written], s3: str, tmp_path: Path
) -> None:
    for kind, checkpoint in written.items():
        checkpoint.copy_to(tmp_path / kind)
        checkpoint.upload(f"{s3}/audit/{kind}")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    upload([tmp_path / "notes.txt"], f"{s3}/audit")
    code, local, err = run_cli("audit", tmp_path, "--format", "json")
    assert code == 0, err
    remote_code, remote, remote_err = run_cli("audit", f"{s3}/audit", "--format", "json")
    assert remote_code == code, remote_err
    rows = _audit_rows(local, str(tmp_path))
    assert _audit_rows(remote, f"{s3}/audit") == rows
    assert len([row for row in rows if row[1] is not None]) == len(written)
    assert ("<BASE>/notes.txt", None, ["CKS015"]) in rows


def test_inspect_fetches_a_small_fraction_and_validate_each_byte_once(large_lightning: Path) -> None:
    prefix = upload([large_lightning, Path(f"{large_lightning}.ckptspec.yaml")], "countingmemory://ranged")
    size = large_lightning.stat().st_size
    assert size > 45_000_000
    CountingMemoryFileSystem.fetched = 0
    code, _out, err = run_cli("inspect", f"{prefix}/{large_lightning.name}")
    assert code == 0, err
    assert CountingMemoryFileSystem.fetched < size // 50, CountingMemoryFileSystem.fetched
    CountingMemoryFileSystem.fetched = 0
    code, out, err = run_cli("validate", f"{prefix}/{large_lightning.name}", "--format", "json")
    assert code == 0, out + err
    assert size <= CountingMemoryFileSystem.fetched < size + size // 50, CountingMemoryFileSystem.fetched


def _flip_tensor_byte(path: Path) -> int:
    """Flip one byte inside the first tensor storage of a torch zip; returns its offset."""
    archive = ZipArchive(path)
    offset = archive.record("data/0").offset  # type: ignore[union-attr]
    archive.close()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    return offset


def test_a_tampered_remote_object_gives_the_local_integrity_finding(written: dict[str, Written], s3: str, tmp_path: Path) -> None:
    checkpoint = written["lightning"]
    for file in checkpoint.files:
        shutil.copyfile(file, tmp_path / file.name)
    local = tmp_path / checkpoint.path.name
    _flip_tensor_byte(local)
    prefix = upload([local, Path(f"{local}.ckptspec.yaml")], f"{s3}/tampered")
    (code, out), (remote_code, remote_out) = _both("validate", local, prefix, "--format", "json")
    assert code == remote_code == 1
    assert remote_out == out
    codes = {finding["code"] for finding in json.loads(out)["results"][0]["findings"]}
    assert codes & {"CKS201", "CKS202", "CKS203", "CKS204"}, out


def test_a_hostile_pickle_in_the_store_is_judged_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile.pt"
    torch.save({"weights": torch.zeros(2), "payload": SystemCall(f"touch {marker}")}, hostile)
    prefix = upload([hostile], "memory://hostile")
    code, out, err = run_cli("validate", f"{prefix}/hostile.pt", "--format", "json")
    assert code == 1, err
    codes = [finding["code"] for finding in json.loads(out)["results"][0]["findings"]]
    assert "CKS401" in codes
    code, out, _err = run_cli("audit", prefix, "--format", "sarif")
    uris = {result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for result in json.loads(out)["runs"][0]["results"]}
    assert code == 1 and "CKS401" in out and str(location(f"{prefix}/hostile.pt")) in uris, uris
    assert all(uri.startswith("memory:///hostile/") for uri in uris), uris
    assert not marker.exists()


def test_store_errors_name_the_url(s3: str) -> None:
    code, _out, err = run_cli("validate", "memory://nowhere/missing.ckpt")
    assert code == 2 and "memory:///nowhere/missing.ckpt" in err and "Traceback" not in err
    code, _out, err = run_cli("inspect", "gs://some-bucket/model.ckpt")
    assert code == 2 and "gs://some-bucket/model.ckpt" in err and "ckptspec[gcs]" in err
    code, _out, err = run_cli("inspect", f"{s3}/no-such-prefix/model.ckpt")
    assert code == 2 and f"{s3}/no-such-prefix/model.ckpt" in err


def test_a_prefix_holding_several_checkpoints_is_not_one(written: dict[str, Written], s3: str) -> None:
    upload(written["torch"].files, f"{s3}/several/a")
    upload(written["safetensors"].files, f"{s3}/several/a")
    code, _out, err = run_cli("inspect", f"{s3}/several/a")
    assert code == 2 and f"{s3}/several/a" in err and "not one checkpoint" in err


def test_manifest_is_written_to_s3_whole(written: dict[str, Written], s3: str) -> None:
    checkpoint = written["torch"].path
    prefix = upload([checkpoint], f"{s3}/adopt")
    code, _out, err = run_cli("manifest", f"{prefix}/{checkpoint.name}")
    assert code == 0, err
    stored = load_manifest(location(f"{prefix}/{checkpoint.name}.ckptspec.yaml"))
    adopted_here = load_manifest(Path(f"{checkpoint}.ckptspec.yaml"))
    assert stored.files == adopted_here.files and stored.components == adopted_here.components
    assert sorted(entry.name for entry in location(prefix).iterdir()) == [checkpoint.name, f"{checkpoint.name}.ckptspec.yaml"]
    code, out, err = run_cli("validate", f"{prefix}/{checkpoint.name}", "--format", "json")
    assert code == 0, out + err


def test_no_manifest_object_appears_when_the_upload_fails(written: dict[str, Written], monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = written["torch"].path
    prefix = upload([checkpoint], "countingmemory://refused-upload")

    def refuse(self: object, path: str, value: bytes, **kwargs: object) -> None:
        raise PermissionError(13, "Access Denied")

    monkeypatch.setattr(CountingMemoryFileSystem, "pipe_file", refuse)
    code, _out, err = run_cli("manifest", f"{prefix}/{checkpoint.name}")
    assert code == 2 and f"{checkpoint.name}.ckptspec.yaml" in err and "permission denied" in err, err
    assert [entry.name for entry in location(prefix).iterdir()] == [checkpoint.name]


def test_an_object_rewritten_in_place_is_read_anew(tmp_path: Path) -> None:
    """The same key and size with other bytes (a pickle edited in place): nothing cached of the old
    object is served for the new one."""
    clean = tmp_path / "model.pt"
    torch.save({"weights_before": torch.zeros(2)}, clean)
    edited = tmp_path / "edited" / "model.pt"
    edited.parent.mkdir()
    edited.write_bytes(clean.read_bytes().replace(b"weights_before", b"weights_after_"))
    prefix = upload([clean], "memory://rewritten")
    first = run_cli("inspect", f"{prefix}/model.pt", "--format", "json", "--tensors")
    upload([edited], prefix)
    second = run_cli("inspect", f"{prefix}/model.pt", "--format", "json", "--tensors")
    assert "weights_before" in first[1] and "weights_after_" in second[1], second


def test_an_object_the_store_refuses_is_named_and_the_audit_goes_on(
    written: dict[str, Written], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = upload(written["torch"].files, "countingmemory://refused-read/ok")
    upload(written["torch"].files, "countingmemory://refused-read/refused")
    allowed = CountingMemoryFileSystem.cat_file

    def refuse(self: CountingMemoryFileSystem, path: str, *args: object, **kwargs: object) -> bytes:
        if "/refused/" in path:
            raise PermissionError(13, "Access Denied")
        return allowed(self, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CountingMemoryFileSystem, "cat_file", refuse)
    refused = str(location(f"countingmemory://refused-read/refused/{written['torch'].path.name}"))
    code, _out, err = run_cli("inspect", refused)
    assert code == 2 and f"{refused}: cannot read: permission denied by the store" in err, err
    code, out, err = run_cli("audit", "countingmemory://refused-read", "--format", "json")
    results = {result["checkpoint"]: result for result in json.loads(out)["results"]}
    assert results[refused]["findings"][0]["code"] == "CKS001", results
    assert results[str(location(f"{prefix}/{written['torch'].path.name}"))]["passed"]


def test_diff_and_the_spec_take_urls(written: dict[str, Written], lightning_spec: Path) -> None:
    checkpoint = written["lightning"]
    prefix = checkpoint.upload("memory://diff-and-spec")
    spec = upload([lightning_spec], "memory://diff-and-spec/policy") + f"/{lightning_spec.name}"
    code, out, err = run_cli("diff", checkpoint.path, f"{prefix}/{checkpoint.path.name}")
    assert code == 0 and "no differences" in out, out + err
    local = run_cli("validate", checkpoint.path, "--spec", lightning_spec, "--format", "json")
    remote = run_cli("validate", f"{prefix}/{checkpoint.path.name}", "--spec", spec, "--format", "json")
    assert local[0] == remote[0] == 0
    assert json.loads(remote[1])["results"][0]["spec"] == json.loads(local[1])["results"][0]["spec"] == "remote-lightning"


def test_a_refused_data_shard_is_a_finding_on_the_bundle(written: dict[str, Written], monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = written["tf"]
    prefix = bundle.upload("countingmemory://refused-shard")
    allowed = CountingMemoryFileSystem.cat_file

    def refuse(self: CountingMemoryFileSystem, path: str, *args: object, **kwargs: object) -> bytes:
        if ".data-" in path:
            raise PermissionError(13, "Access Denied")
        return allowed(self, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CountingMemoryFileSystem, "cat_file", refuse)
    code, out, err = run_cli("validate", f"{prefix}/{bundle.path.name}", "--format", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1, err
    assert any("permission denied" in finding["message"] and ".data-" in (finding["file"] or "") for finding in findings), findings
    assert not any(finding["code"] == "CKS009" for finding in findings), findings


class _RewrittenMidRead(fsspec.implementations.memory.MemoryFileSystem):
    """A memory store in which another writer replaces the checkpoint once its first bytes were read:
    a registry upload overwritten while intake judges it."""

    protocol = ("rewrittenmemory",)
    replacement = b""

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(path.removeprefix("rewrittenmemory://")))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: object) -> bytes:
        data = super().cat_file(path, start=start, end=end, **kwargs)
        if path.endswith("model.pt") and type(self).replacement:
            self.pipe_file(path, type(self).replacement)
            type(self).replacement = b""
        return bytes(data)


fsspec.register_implementation("rewrittenmemory", _RewrittenMidRead, clobber=True)


def test_an_object_rewritten_while_it_is_judged_gives_no_verdict_of_mixed_versions(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    torch.save({"state_dict": {"weight": torch.zeros(4)}}, checkpoint)
    code, _, err = run_cli("manifest", checkpoint)
    assert code == 0, err
    prefix = upload([checkpoint, tmp_path / "model.pt.ckptspec.yaml"], "rewrittenmemory://upload")
    assert run_cli("validate", f"{prefix}/model.pt")[0] == 0
    torch.save({"state_dict": {"weight": torch.ones(4)}}, tmp_path / "other.pt")
    _RewrittenMidRead.replacement = (tmp_path / "other.pt").read_bytes()

    code, out, _ = run_cli("validate", f"{prefix}/model.pt")

    assert code == 1
    assert "CKS001" in out and "model.pt: rewritten while it was read" in out and "judge it again" in out


def test_an_s3_object_rewritten_after_it_was_opened_is_found(s3: str, tmp_path: Path) -> None:
    from ckptspec.formats._source import open_source, remote_files_watched

    first, second = tmp_path / "first.bin", tmp_path / "second.bin"
    first.write_bytes(b"a" * 100)
    second.write_bytes(b"b" * 100)
    prefix = upload([first], f"{s3}/watched")
    url = location(f"{prefix}/first.bin")
    with remote_files_watched() as rewritten:
        open_source(url).close()
        assert rewritten() == []
        url.fs.put_file(str(second), url.path)
        ((changed, what),) = rewritten()
    assert changed == url and what.startswith("rewritten while it was read (100 bytes, ETag ") and "; now 100 bytes, ETag " in what
