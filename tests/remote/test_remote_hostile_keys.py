"""Keys an uploader chose, on the real S3 API server: S3 keeps `..`, `.` and `//` in keys verbatim,
and consoles leave empty `folder/` objects."""

from __future__ import annotations

import io

from ckptspec import audit

from .conftest import BUCKET, fsspec, torch


def test_keys_naming_other_objects_are_reported_and_folder_markers_are_no_files(s3: str) -> None:
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buffer)
    for key in ["outside/model.pt", "hostile/../outside/model.pt", "hostile/a//model.pt", "hostile/./model.pt", "hostile/good.pt"]:
        fs.pipe_file(f"{BUCKET}/{key}", buffer.getvalue())
    fs.pipe_file(f"{BUCKET}/hostile/empty/", b"")
    fs.invalidate_cache()
    assert f"{BUCKET}/hostile/empty/" in fs.find(f"{BUCKET}/hostile")

    results = {r.checkpoint: [(f.code, f.message) for f in r.findings] for r in audit([f"{s3}/hostile"]).results}

    assert set(results) == {f"{s3}/hostile/{key}" for key in ["good.pt", "../outside/model.pt", "a//model.pt", "./model.pt"]}
    assert "CKS001" not in {code for code, _ in results[f"{s3}/hostile/good.pt"]}
    for key in ["../outside/model.pt", "a//model.pt", "./model.pt"]:
        ((code, message), *_) = results[f"{s3}/hostile/{key}"]
        assert code == "CKS001" and "names another object once normalised" in message
