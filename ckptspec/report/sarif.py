"""SARIF 2.1.0, for code-scanning dashboards. `tool.driver.rules` lists only the rules that fired,
each with the full documentation from its docstring; locations name the file and, as a logical
location, the key or tensor (JSON Pointer) inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from .._json_text import indented_json
from .._storage import is_url
from .._version import __version__
from ..checks import RULES, Finding, Rule
from .._result import Report

__all__ = ["SARIF_SCHEMA", "render_sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def render_sarif(report: Report) -> str:
    fired = sorted({finding.code for finding in report.findings})
    index = {code: position for position, code in enumerate(fired)}
    run = {
        "tool": {"driver": {"name": "ckptspec", "version": __version__, "rules": [_rule(RULES[code]) for code in fired]}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
        "results": [_result(finding, index[finding.code]) for finding in report.findings],
    }
    return indented_json({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}) + "\n"


def _rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.section("What it does")},
        "help": {"text": rule.doc, "markdown": rule.doc},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"family": rule.family, "lifecycle": rule.lifecycle.label},
    }


def _result(finding: Finding, rule_index: int) -> dict[str, Any]:
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": _artifact(finding.file or finding.checkpoint)}}
    if finding.pointer is not None:
        location["logicalLocations"] = [{"fullyQualifiedName": finding.pointer or "/", "kind": "member"}]
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVEL[finding.severity],
        "message": {"text": finding.message},
        "locations": [location],
    }
    if finding.path:
        result["properties"] = {"manifestPath": finding.manifest_path}
    return result


def _artifact(file: str) -> dict[str, str]:
    if is_url(file):
        return {"uri": file}  # a storage URL is already absolute
    path = Path(file).absolute()
    try:
        relative = path.relative_to(Path.cwd())
    except ValueError:
        return {"uri": path.as_uri()}
    return {"uri": quote(relative.as_posix(), safe="/=-_.~"), "uriBaseId": "%SRCROOT%"}
