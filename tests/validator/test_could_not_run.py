"""A check that cannot run is a finding, never a silent pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from .conftest import run_cli

from ckptspec import checks
from ckptspec.checks import Context, Finding
from ckptspec.report import render_junit
from ckptspec import Report, validate


def test_a_crashing_check_is_reported(torch_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: Context) -> Iterator[Finding]:
        yield from ()
        raise KeyError("param_groups")

    monkeypatch.setitem(checks.FAMILY_CHECKS, "consistency", broken)
    result = validate(torch_checkpoint)
    assert [(f.code, f.message) for f in result.findings] == [
        ("CKS009", "the consistency checks crashed: KeyError: 'param_groups'")
    ]
    assert result.exit_code == 1


def test_unreadable_checkpoint_fails_its_junit_suite(tmp_path: Path, torch_checkpoint: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(torch_checkpoint.read_bytes()[:200])
    Path(f"{path}.ckptspec.yaml").write_text(Path(f"{torch_checkpoint}.ckptspec.yaml").read_text())
    result = validate(path)
    assert {f.code for f in result.findings} == {"CKS001", "CKS202"}
    xml = render_junit(Report([result]))
    assert '<testcase name="ckptspec.input"' in xml and 'type="CKS001"' in xml and 'type="CKS202"' in xml


def test_spec_not_given_nor_embedded(torch_checkpoint: Path, tmp_path: Path) -> None:
    from ckptspec.adopt import adopt

    path = tmp_path / "model.pt"
    path.write_bytes(torch_checkpoint.read_bytes())
    adopt(path)
    result = validate(path)
    assert [f.code for f in result.findings] == ["CKS004"]


UNREAD_FORMAT_MESSAGES = {
    "preview.pt": "a torch preview-release archive (PYTORCH1); loading it can run code, and ckptspec cannot judge this format yet",
}


@pytest.fixture(scope="module")
def unjudged_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Files in formats ckptspec does not read, whose loader would run code from them."""
    directory = tmp_path_factory.mktemp("unjudged")
    (directory / "preview.pt").write_bytes(b"PYTORCH1" + bytes(64))
    return {name: directory / name for name in UNREAD_FORMAT_MESSAGES}


def test_object_arrays_and_compressed_pickles_are_judged(tmp_path: Path) -> None:
    """Formats once refused as not judged are opened now, and plain values in them pass."""
    import gzip
    import pickle

    numpy = pytest.importorskip("numpy")
    numpy.save(tmp_path / "object-array.npy", numpy.array([{"step": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "packed.joblib").write_bytes(gzip.compress(pickle.dumps({"step": 1})))
    code, out, _ = run_cli("audit", tmp_path / "object-array.npy", tmp_path / "packed.joblib", "--format", "json")
    results = json.loads(out)["results"]
    assert code == 0 and [(r["format"], r["findings"]) for r in results] == [("archive", [])] * 2


@pytest.mark.parametrize("name", sorted(UNREAD_FORMAT_MESSAGES))
def test_a_format_ckptspec_does_not_read_cannot_run(unjudged_files: dict[str, Path], name: str) -> None:
    path = unjudged_files[name]
    code, out, err = run_cli("validate", path)
    assert (code, out, err) == (2, "", f"error: {path}: {UNREAD_FORMAT_MESSAGES[name]}\n")


def test_in_an_audit_a_format_ckptspec_does_not_read_is_a_finding(unjudged_files: dict[str, Path]) -> None:
    code, out, _ = run_cli("audit", *unjudged_files.values(), "--format", "json")
    findings = {r["checkpoint"]: [(f["code"], f["message"]) for f in r["findings"]] for r in json.loads(out)["results"]}
    assert code == 1
    # Recognised by content, and loading one runs code: a format not judged (CKS016), never a skip.
    assert findings == {str(unjudged_files[name]): [("CKS016", f"{unjudged_files[name]}: {message}")] for name, message in UNREAD_FORMAT_MESSAGES.items()}
