"""A manifest or spec in an upload is read only when it is of a size a document can have: a
gigabyte-sized "manifest" is a finding on that file, not gigabytes in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from click.testing import CliRunner

from ckptspec import load_spec, validate
from ckptspec._documents import MAX_DOCUMENT_SIZE
from ckptspec._exceptions import DocumentError
from ckptspec.cli import cli


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize("size", [MAX_DOCUMENT_SIZE + 1, 64 << 30])
def test_a_huge_manifest_is_a_finding_and_never_read(torch_file: Path, tmp_path: Path, size: int) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(torch_file.read_bytes())
    _sparse(tmp_path / "model.pt.ckptspec.yaml", size)

    result = validate(checkpoint)

    (unreadable,) = [f.message for f in result.findings if f.code == "CKS003"]
    assert unreadable == f"{tmp_path / 'model.pt.ckptspec.yaml'}: {size} bytes, larger than the {MAX_DOCUMENT_SIZE} bytes of any spec or manifest; it was not read"


def test_a_huge_spec_is_refused_with_exit_2(torch_file: Path, tmp_path: Path) -> None:
    spec = _sparse(tmp_path / "spec.yaml", 64 << 30)

    outcome = CliRunner().invoke(cli, ["validate", str(torch_file), "--spec", str(spec)])

    assert outcome.exit_code == 2 and "larger than" in outcome.output and "spec.yaml" in outcome.output
    with pytest.raises(DocumentError, match="larger than"):
        load_spec(spec)


_DEEP = 5_000
_NESTINGS = {
    "block sequences": "description:\n" + "- " * _DEEP + "x\n",
    "block mappings": "description:\n" + "".join("  " * (level + 1) + "k:\n" for level in range(_DEEP)) + "  " * (_DEEP + 1) + "x\n",
    "flow sequences": "description: " + "[" * _DEEP + "]" * _DEEP + "\n",
}


@pytest.mark.parametrize("nesting", _NESTINGS)
def test_a_spec_nested_past_any_real_document_is_refused_at_its_line(torch_file: Path, tmp_path: Path, nesting: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text('ckptspec: "1.1"\nkind: spec\nname: deep\n' + _NESTINGS[nesting])

    outcome = CliRunner().invoke(cli, ["validate", str(torch_file), "--spec", str(spec)])

    assert outcome.exit_code == 2, outcome.output
    assert f"{spec}:" in outcome.output and "nest" in outcome.output and "internal error" not in outcome.output


def test_a_manifest_nested_past_any_real_document_is_a_finding(torch_file: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(torch_file.read_bytes())
    manifest = tmp_path / "model.pt.ckptspec.yaml"
    manifest.write_text('ckptspec: "1.1"\nkind: manifest\nformat: torch\ncheckpoint: model.pt\nunknown:\n' + "- " * _DEEP + "x\n")

    result = validate(checkpoint)

    (unreadable,) = [f.message for f in result.findings if f.code == "CKS003"]
    assert unreadable.startswith(f"{manifest}:6:") and "nested deeper than 100 levels" in unreadable


@pytest.mark.parametrize("field", ["files[0].path", "checkpoint"])
def test_a_manifest_naming_a_path_with_a_nul_byte_is_a_finding_on_that_field(torch_file: Path, tmp_path: Path, field: str) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(torch_file.read_bytes())
    assert CliRunner().invoke(cli, ["manifest", str(checkpoint)]).exit_code == 0
    manifest = tmp_path / "model.pt.ckptspec.yaml"
    recorded = {"files[0].path": "- path: model.pt\n", "checkpoint": "checkpoint: model.pt\n"}[field]
    text = manifest.read_text()
    assert recorded in text
    manifest.write_text(text.replace(recorded, recorded.replace("model.pt", '"model\\0.pt"')))

    result = validate(checkpoint)
    linted = CliRunner().invoke(cli, ["lint", str(manifest)])

    (invalid,) = [f.message for f in result.findings if f.code == "CKS003"]
    assert f"{field}: string should match pattern" in invalid and "'model\\x00.pt'" in invalid
    assert linted.exit_code == 1 and f"{field}: string should match pattern" in linted.output
    assert "internal error" not in linted.output
