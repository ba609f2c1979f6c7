"""A TF1 bundle whose prefix has an empty base name (`dir/.index`): read like any other."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint

from .conftest import run_cli


@pytest.mark.parametrize("name", ["", ".index", ".data-00000-of-00001"])
def test_every_way_of_naming_it_finds_the_bundle(tf1_empty_prefix: Path, name: str) -> None:
    found = detect(tf1_empty_prefix / name if name else tf1_empty_prefix)
    assert (found.kind, found.path) == ("tf-bundle", tf1_empty_prefix)


def test_inspect_reads_the_tensors_tensorflow_wrote(tf1_empty_prefix: Path) -> None:
    tensors = {t.key: (t.dtype, t.shape) for t in inspect_checkpoint(tf1_empty_prefix).tensors}
    assert tensors == {"/conv~1kernel": ("float32", (2, 3)), "/conv~1bias": ("float32", (3,))}
    code, out, err = run_cli("inspect", f"{tf1_empty_prefix}/", "--format", "json")
    assert (code, err) == (0, "")
    assert {f["path"] for f in json.loads(out)["files"]} == {
        str(tf1_empty_prefix / ".index"),
        str(tf1_empty_prefix / ".data-00000-of-00001"),
    }


def test_adopted_then_validated_without_a_finding(tf1_empty_prefix: Path, tmp_path: Path) -> None:
    copy = tmp_path / "musicnn"
    shutil.copytree(tf1_empty_prefix, copy, ignore=shutil.ignore_patterns("checkpoint"))
    code, _out, err = run_cli("manifest", copy / ".index")
    assert code == 0 and err.startswith(f"wrote {tmp_path / 'musicnn.ckptspec.yaml'}\n")
    code, out, _err = run_cli("validate", copy, "--format", "json")
    errors = [f["code"] for f in json.loads(out)["results"][0]["findings"] if f["severity"] == "error"]
    assert errors in ([], ["CKS004"])  # no spec was given: completeness alone is not checked


def test_a_state_file_pointing_at_the_writers_own_disk_does_not_hide_the_bundle(tf1_empty_prefix: Path, tmp_path: Path) -> None:
    """As shipped: the `checkpoint` file names the absolute path the bundle had on its author's machine."""
    copy = tmp_path / "shipped"
    shutil.copytree(tf1_empty_prefix, copy)
    (copy / "checkpoint").write_text('model_checkpoint_path: "/home/someone/experiments/run-17"\n')
    code, out, err = run_cli("inspect", f"{copy}/", "--format", "json")
    assert (code, err) == (0, "") and json.loads(out)["summary"]["tensor_count"] == 2
    assert run_cli("manifest", f"{copy}/")[0] == 0
    code, out, _err = run_cli("audit", tmp_path, "--format", "json")
    codes = [f["code"] for result in json.loads(out)["results"] for f in result["findings"]]
    assert "CKS013" in codes and "CKS001" not in codes
