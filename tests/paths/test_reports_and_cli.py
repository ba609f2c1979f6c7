"""What users see: JUnit skips for checks that did not run, the spec's framework enforced, lint in
line order, `schema --check` outside a checkout, and `inspect` into a pipe."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ckptspec import Report, validate
from ckptspec.report import render_junit

from .conftest import run_cli

_TORCH_SPEC = 'ckptspec: "1.0"\nkind: spec\nname: plain-torch\nframework: torch\n'


def _cases(xml: str) -> dict[str, ET.Element]:
    suite = ET.fromstring(xml.split("?>", 1)[1])[0]
    return {case.get("name", ""): case for case in suite}


def test_junit_marks_checks_without_a_manifest_skipped_with_the_reason(torch_file: Path) -> None:
    cases = _cases(render_junit(Report([validate(torch_file)])))
    assert cases["ckptspec.input"].find("failure") is not None
    for family, reason in (("integrity", "CKS002 manifest-missing"), ("consistency", "CKS002"), ("completeness", "CKS004 spec-missing")):
        skipped = cases[f"ckptspec.{family}"].find("skipped")
        assert skipped is not None and reason in skipped.get("message", ""), family
    assert cases["ckptspec.safety"].find("skipped") is None  # it read the file's pickle: it ran


def test_junit_marks_every_check_of_an_unreadable_file_skipped(tmp_path: Path) -> None:
    damaged = tmp_path / "model.pt"
    damaged.write_bytes(b"PK\x03\x04" + b"\0" * 60)
    cases = _cases(render_junit(Report([validate(damaged)])))
    for family in ("completeness", "integrity", "consistency", "safety"):
        skipped = cases[f"ckptspec.{family}"].find("skipped")
        assert skipped is not None and "CKS001 checkpoint-unreadable" in skipped.get("message", "")


def test_a_tensorflow_bundle_under_a_torch_spec_is_a_finding(tf1_empty_prefix: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_TORCH_SPEC)
    result = validate(tf1_empty_prefix, spec)
    [mismatch] = [f for f in result.findings if f.code == "CKS017"]
    assert mismatch.message == "the spec 'plain-torch' declares framework: torch, but this is a tensorflow checkpoint"


def test_a_plain_torch_file_under_a_torch_spec_is_no_mismatch(torch_file: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_TORCH_SPEC)
    assert "CKS017" not in {f.code for f in validate(torch_file, spec).findings}


def test_lint_lists_problems_in_line_order(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        'ckptspec: "1.0"\nkind: spec\nname: x\ncomponents:\n  zmodel: {require: required}\n'
        "  model: {require: sometimes}\n  amodel: {require: never}\n"
    )
    _code, out, _err = run_cli("lint", spec)
    lines = [int(line.split(":")[1]) for line in out.splitlines() if line.startswith(f"{spec}:")]
    assert len(lines) >= 2 and lines == sorted(lines)


def test_schema_check_outside_a_checkout_says_what_it_compares(tmp_path: Path) -> None:
    code, out, err = run_cli("schema", "--check", "--dir", tmp_path / "schema")
    assert (code, out) == (2, "") and "differs" not in err
    assert err.startswith(f"error: {tmp_path / 'schema' / 'spec-v1.json'}, {tmp_path / 'schema' / 'manifest-v1.json'}: no such file")


def test_inspect_into_a_closed_pipe_is_no_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "many.pt"
    torch.save({f"encoder.blocks.{i}.attention.projection.weight": torch.zeros(1) for i in range(3000)}, path)
    command = [sys.executable, "-m", "ckptspec", "inspect", str(path), "--tensors"]
    env = {**os.environ, "COLUMNS": "80"}
    whole = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert whole.returncode == 0
    row = next(line for line in whole.stdout.splitlines() if "encoder.blocks.2999." in line)
    assert "projection~1weight" in row or "projection.weight" in row  # one row, not wrapped at 80 columns
    reader = subprocess.Popen(["head", "-n", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    writer = subprocess.run(command, stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    reader.stdin.close()  # type: ignore[union-attr]
    reader.wait()
    assert writer.returncode in (0, 141) and writer.stderr == ""
