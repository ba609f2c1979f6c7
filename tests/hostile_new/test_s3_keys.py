"""The same keys on a real S3 API server (moto): S3 keeps `..`, `.` and `//` in keys verbatim."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptspec import audit

from ..remote.conftest import BUCKET, s3  # noqa: F401 - the session's S3 server

fsspec = pytest.importorskip("fsspec")


def test_keys_naming_other_objects_and_folder_markers_on_s3(s3: str, torch_file: Path) -> None:  # noqa: F811
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    payload = torch_file.read_bytes()
    for key in ["outside/model.pt", "hostile/../outside/model.pt", "hostile/a//model.pt", "hostile/./model.pt", "hostile/good.pt"]:
        fs.pipe_file(f"{BUCKET}/{key}", payload)
    fs.pipe_file(f"{BUCKET}/hostile/empty/", b"")  # a console's folder marker
    fs.invalidate_cache()
    assert f"{BUCKET}/hostile/empty/" in fs.find(f"{BUCKET}/hostile")

    results = {r.checkpoint: [(f.code, f.message) for f in r.findings] for r in audit([f"{s3}/hostile"]).results}

    assert set(results) == {f"{s3}/hostile/{key}" for key in ["good.pt", "../outside/model.pt", "a//model.pt", "./model.pt"]}
    assert "CKS001" not in {code for code, _ in results[f"{s3}/hostile/good.pt"]}
    for key in ["../outside/model.pt", "a//model.pt", "./model.pt"]:
        assert results[f"{s3}/hostile/{key}"][0][0] == "CKS001" and "names another object" in results[f"{s3}/hostile/{key}"][0][1]
