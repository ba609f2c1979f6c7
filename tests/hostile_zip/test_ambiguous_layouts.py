"""Zip layouts that let two readers see different archives. Each is built from real torch.save records
with a malicious `data.pkl` that runs a command under `torch.load(weights_only=False)`; the test records
what torch does with the layout, and checks that ckptspec refuses it (inspect) or flags it (validate)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import AmbiguousArchiveError
from ckptspec.cli import cli
from ckptspec.formats.torchzip import open_torch_checkpoint

from ._layouts import LAYOUTS, READ_AS_TORCH_READS, Sources

TORCH_RUNS_THE_PAYLOAD = {
    "upper-case-pickle-name", "zip64-sizes",
    "duplicate-name", "case-folded-duplicate", "nul-in-name", "end-record-elsewhere", "zip64-locator-elsewhere",
    "local-name-differs", "hidden-record-between", "prepended-archive", "overlapping-records", "deflated-pickle",
    "descriptor-disagrees", "two-zip64-fields", "trailing-bytes",
}  # fmt: skip
ZIPFILE_SEES_THE_BENIGN_PICKLE = {"nul-in-name", "end-record-elsewhere", "zip64-locator-elsewhere"}
NAMED_IN_REFUSAL = {
    "duplicate-name": "named twice",
    "case-folded-duplicate": "ignores ASCII case",
    "nul-in-name": "NUL byte",
    "end-record-elsewhere": "places the central directory",
    "zip64-locator-elsewhere": "Zip64 locator",
    "local-name-differs": "local header",
    "hidden-record-between": "unaccounted bytes",
    "prepended-archive": "unaccounted bytes at 0..",
    "overlapping-records": "records overlap",
    "deflated-pickle": "compressed",
    "descriptor-disagrees": "data descriptor",
    "two-zip64-fields": "2 Zip64 fields",
    "trailing-bytes": "follow the end-of-central-directory record",
}


def _invoke(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout + result.stderr


def test_torch_load_runs_the_payload_of_every_layout(torch_verdicts: dict[str, str]) -> None:
    ran = {name for name, verdict in torch_verdicts.items() if verdict == "ran"}
    assert ran == TORCH_RUNS_THE_PAYLOAD, torch_verdicts


@pytest.mark.parametrize("layout", sorted(ZIPFILE_SEES_THE_BENIGN_PICKLE))
def test_pythons_zipfile_sees_the_benign_pickle(layout: str, layouts: dict[str, Path], sources: Sources) -> None:
    with zipfile.ZipFile(layouts[layout]) as archive:
        assert archive.read("archive/data.pkl") == sources.pickle(sources.benign).data


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_reader_refuses_the_layout_by_name(layout: str, layouts: dict[str, Path]) -> None:
    with pytest.raises(AmbiguousArchiveError) as caught:
        open_torch_checkpoint(layouts[layout])
    message = str(caught.value)
    assert message.startswith(f"{layouts[layout]}: ambiguous zip archive: "), message
    assert NAMED_IN_REFUSAL[layout] in message, message


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_inspect_refuses_and_validate_reports_a_safety_error(layout: str, layouts: dict[str, Path]) -> None:
    path = layouts[layout]
    code, output = _invoke("inspect", path)
    assert code == 2 and f"{path}: ambiguous zip archive" in output, output
    code, output = _invoke("validate", path, "--format", "json")
    assert code == 1, output
    findings = [finding for result in json.loads(output)["results"] for finding in result["findings"]]
    ambiguous = [finding for finding in findings if finding["code"] == "CKS410"]
    assert len(ambiguous) == 1 and ambiguous[0]["family"] == "safety" and ambiguous[0]["file"] == str(path), findings
    assert NAMED_IN_REFUSAL[layout] in ambiguous[0]["message"]


@pytest.mark.parametrize("layout", sorted(READ_AS_TORCH_READS))
def test_an_unusual_layout_is_read_as_torch_reads_it_and_its_danger_named(layout: str, layouts: dict[str, Path]) -> None:
    with open_torch_checkpoint(layouts[layout]) as checkpoint:
        dangerous = [used.qualname for used in checkpoint.globals if used.safety == "dangerous"]
        assert dangerous and all(name.endswith(".system") for name in dangerous), checkpoint.globals
    code, output = _invoke("validate", layouts[layout], "--format", "json")
    assert code == 1 and '"code": "CKS401"' in output, output


def test_audit_flags_every_layout_in_a_directory(layouts: dict[str, Path]) -> None:
    (directory,) = {path.parent for path in layouts.values()}
    code, output = _invoke("audit", directory, "--format", "json")
    assert code == 1, output
    codes = {Path(result["checkpoint"]).stem: {f["code"] for f in result["findings"]} for result in json.loads(output)["results"]}
    assert {name for name, found in codes.items() if "CKS410" in found} == set(LAYOUTS)
    assert {name for name, found in codes.items() if "CKS401" in found} == {*READ_AS_TORCH_READS, "deflated-pickle"}


def test_a_deflated_pickle_is_refused_and_what_torch_would_unpickle_is_named(layouts: dict[str, Path]) -> None:
    code, output = _invoke("validate", layouts["deflated-pickle"], "--format", "json")
    findings = [(f["code"], f["message"]) for result in json.loads(output)["results"] for f in result["findings"]]
    assert code == 1 and "CKS410" in {found for found, _ in findings}, findings
    assert any(found == "CKS401" and ".system" in message for found, message in findings), findings


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_adoption_refuses_the_layout_and_writes_nothing(layout: str, layouts: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / layouts[layout].name
    shutil.copy(layouts[layout], path)
    code, output = _invoke("manifest", path)
    assert code == 1 and f"CKS410 ambiguous-archive: {path}: ambiguous zip archive" in output, output
    assert sorted(tmp_path.iterdir()) == [path]
