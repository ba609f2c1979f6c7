"""JUnit XML: one `<testsuite>` per checkpoint, one `<testcase>` per rule family.

A family with error findings is a `<failure>`, listing them; warnings go to `<system-out>`. The
`input` family (unreadable checkpoint, missing manifest or spec) is a testcase too, so a checkpoint
that could not be judged fails instead of passing with nothing run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..checks import FAMILIES, Finding
from .._validate import Report, Result

__all__ = ["render_junit"]


def render_junit(report: Report) -> str:
    suites = ET.Element("testsuites", name="ckptspec")
    total = failures = 0
    for result in report.results:
        suite = _suite(result)
        suites.append(suite)
        total += int(suite.get("tests", "0"))
        failures += int(suite.get("failures", "0"))
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _suite(result: Result) -> ET.Element:
    suite = ET.Element("testsuite", name=result.checkpoint)
    failures = 0
    for family in FAMILIES:
        findings = [f for f in result.findings if f.family == family]
        case = ET.SubElement(suite, "testcase", name=f"ckptspec.{family}", classname=result.checkpoint)
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            failures += 1
            failure = ET.SubElement(case, "failure", message=_headline(errors), type=errors[0].code)
            failure.text = "\n".join(_line(f) for f in errors)
        others = [f for f in findings if f.severity != "error"]
        if others:
            ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in others)
    suite.set("tests", str(len(FAMILIES)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    return suite


def _headline(errors: list[Finding]) -> str:
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{errors[0].code} {errors[0].name}: {errors[0].message}{more}"


def _line(finding: Finding) -> str:
    where = f" {finding.location}:" if finding.location else ""
    return f"{finding.code} [{finding.severity}] {finding.name}{where} {finding.message}"
