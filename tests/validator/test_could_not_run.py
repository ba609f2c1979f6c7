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
    "torchscript": "TorchScript archive (torch.jit.save, has constants.pkl); ckptspec reads torch.save checkpoints only",
    "legacy": "legacy (pre-1.6) torch.save format; re-save it with torch ≥ 1.6 to read it",
}


@pytest.mark.parametrize("kind", sorted(UNREAD_FORMAT_MESSAGES))
def test_a_format_ckptspec_does_not_read_cannot_run(unread_formats: dict[str, Path], kind: str) -> None:
    path = unread_formats[kind]
    code, out, err = run_cli("validate", path)
    assert (code, out, err) == (2, "", f"error: {path}: {UNREAD_FORMAT_MESSAGES[kind]}\n")


def test_in_an_audit_a_format_ckptspec_does_not_read_is_a_finding(unread_formats: dict[str, Path]) -> None:
    code, out, _ = run_cli("audit", *(unread_formats[kind] for kind in UNREAD_FORMAT_MESSAGES), "--format", "json")
    findings = {r["checkpoint"]: [(f["code"], f["message"]) for f in r["findings"]] for r in json.loads(out)["results"]}
    assert code == 1
    assert findings == {str(unread_formats[kind]): [("CKS001", f"{unread_formats[kind]}: {message}")] for kind, message in UNREAD_FORMAT_MESSAGES.items()}
