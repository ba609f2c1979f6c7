"""`ckptspec audit` over a directory of 50 mixed checkpoints: one report in every format."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from .conftest import copy_checkpoint, run_cli

from ckptspec.checks import FAMILIES, RULES
from ckptspec.formats.torchzip import open_torch_checkpoint
from ckptspec._discover import discover

SARIF_SCHEMA = Path(__file__).resolve().parent.parent / "fixtures" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="session")
def audit_corpus(
    tmp_path_factory: pytest.TempPathFactory, lightning_checkpoint: Path, torch_checkpoint: Path, tf_checkpoints: dict[str, Path]
) -> dict[str, object]:
    """48 sound checkpoints of three formats, one with a flipped tensor byte, one garbage file."""
    root = tmp_path_factory.mktemp("registry")
    sources = [lightning_checkpoint, torch_checkpoint, tf_checkpoints["latest"], tf_checkpoints["sharded"]]
    for index in range(48):
        copy_checkpoint(sources[index % len(sources)], root / f"run-{index:02d}")
    flipped = copy_checkpoint(lightning_checkpoint, root / "run-48")
    with open_torch_checkpoint(flipped) as checkpoint:
        start, _ = checkpoint.resolve("/state_dict/net.0.weight").byte_range
    data = bytearray(flipped.read_bytes())
    data[start] ^= 0xFF
    flipped.write_bytes(data)
    garbage = root / "run-49" / "broken.ckpt"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00garbage" * 64)
    return {"root": root, "failing": {str(flipped), str(garbage)}}


@pytest.fixture(scope="session")
def json_report(audit_corpus: dict[str, object]) -> dict[str, object]:
    code, out, _ = run_cli("audit", audit_corpus["root"], "--jobs", "2", "--format", "json")
    assert code == 1
    return json.loads(out)


def test_discovery_finds_every_checkpoint_once(audit_corpus: dict[str, object]) -> None:
    found = discover([audit_corpus["root"]]).checkpoints
    assert len(found) == len(set(found)) == 50


def test_json_report_covers_all_fifty(json_report: dict[str, object], audit_corpus: dict[str, object]) -> None:
    results = json_report["results"]
    assert json_report["summary"]["checkpoints"] == 50
    assert {r["checkpoint"] for r in results if not r["passed"]} == audit_corpus["failing"]
    assert {r["format"] for r in results} == {"lightning", "torch", "tf-bundle", None}
    garbage = next(r for r in results if r["checkpoint"].endswith("broken.ckpt"))
    assert [f["code"] for f in garbage["findings"]] == ["CKS001"]


def test_sarif_report_is_valid_sarif_2_1_0(audit_corpus: dict[str, object]) -> None:
    code, out, _ = run_cli("audit", audit_corpus["root"], "--format", "sarif")
    document = json.loads(out)
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator(schema).validate(document)
    run = document["runs"][0]
    rule_ids = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert code == 1 and rule_ids == sorted({result["ruleId"] for result in run["results"]})
    for result in run["results"]:
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    tensor_result = next(r for r in run["results"] if r["ruleId"] == "CKS207")
    assert tensor_result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"].startswith("/state_dict/")


def test_junit_report_has_a_suite_per_checkpoint_and_a_case_per_family(audit_corpus: dict[str, object], tmp_path: Path) -> None:
    output = tmp_path / "junit.xml"
    code, _, err = run_cli("audit", audit_corpus["root"], "--format", "junit", "--output", output)
    assert (code, err) == (1, f"wrote {output}\n")
    suites = ET.parse(output).getroot()
    assert suites.tag == "testsuites" and len(suites) == 50
    assert all([case.get("name") for case in suite] == [f"ckptspec.{f}" for f in FAMILIES if f != "lineage"] for suite in suites)
    failed = {suite.get("name") for suite in suites if int(suite.get("failures", "0"))}
    assert failed == audit_corpus["failing"]
    failures = [case.find("failure") for suite in suites for case in suite if case.find("failure") is not None]
    assert {failure.get("type") for failure in failures} == {"CKS001", "CKS203"}


def test_text_report_ends_with_a_summary_table(audit_corpus: dict[str, object]) -> None:
    code, out, _ = run_cli("audit", audit_corpus["root"], "--jobs", "2")
    assert code == 1
    # The flipped byte: file digest and tensor checksum; the garbage file: unreadable.
    assert out.endswith("50 checkpoints: 48 passed, 2 failed; 3 errors, 0 warnings\n")
    assert "checkpoint" in out and "format" in out and "FAIL" in out


def test_markdown_report_lists_failing_findings(audit_corpus: dict[str, object]) -> None:
    _, out, _ = run_cli("audit", audit_corpus["root"], "--format", "markdown")
    assert out.startswith("## ckptspec: failed\n")
    assert out.count("❌ fail") == 2 and out.count("✅ ok") == 48


def test_sound_subset_exits_clean(audit_corpus: dict[str, object]) -> None:
    root = audit_corpus["root"]
    code, out, _ = run_cli("audit", root / "run-00", root / "run-01", root / "run-02", "--format", "json")
    assert code == 0 and json.loads(out)["passed"] is True


def test_every_rule_in_the_sarif_catalogue_has_its_docs(audit_corpus: dict[str, object]) -> None:
    _, out, _ = run_cli("audit", audit_corpus["root"], "--format", "sarif")
    for rule in json.loads(out)["runs"][0]["tool"]["driver"]["rules"]:
        assert rule["help"]["markdown"] == RULES[rule["id"]].doc
