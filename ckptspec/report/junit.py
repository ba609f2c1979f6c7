"""JUnit XML: one `<testsuite>` per checkpoint, one `<testcase>` per rule family.

A family with error findings is a `<failure>`, listing them; warnings go to `<system-out>`. The
`input` family (unreadable checkpoint, missing manifest or spec) is a testcase too, so a checkpoint
that could not be judged fails instead of passing with nothing run. A family whose checks did not
run, or could not look at what they check (no manifest, no spec, an unreadable file), is
`<skipped>` with the reason: never a pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..checks import FAMILIES, Family, Finding, Rule, inputs as inputs_module, rule_by_code
from ..checks.inputs import CouldNotCheck
from .._printable import printable
from .._result import Report, Result

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
    suites.set("skipped", str(sum(int(suite.get("skipped", "0")) for suite in suites)))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _suite(result: Result) -> ET.Element:
    suite = ET.Element("testsuite", name=printable(result.checkpoint))
    failures = skipped = 0
    families = [family for family in FAMILIES if family != "lineage" or family in result.families]  # lineage: a run's, not one file's
    for family in families:
        findings = [f for f in result.findings if f.family == family]
        case = ET.SubElement(suite, "testcase", name=f"ckptspec.{family}", classname=printable(result.checkpoint))
        errors = [f for f in findings if f.severity == "error"]
        reason = _not_run(result, family) if not errors else None
        if reason is not None:
            ET.SubElement(case, "skipped", message=printable(reason))
            skipped += 1
        if errors:
            failures += 1
            failure = ET.SubElement(case, "failure", message=_headline(errors), type=errors[0].code)
            failure.text = "\n".join(_line(f) for f in errors)
        others = [f for f in findings if f.severity != "error"]
        if others:
            ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in others)
    suite.set("tests", str(len(families)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    return suite


_NEEDS_MANIFEST: tuple[Family, ...] = ("integrity", "consistency")
_NEEDS_SPEC: tuple[Family, ...] = ("completeness",)


def _not_run(result: Result, family: Family) -> str | None:
    """Why `family`'s checks did not run, or ran without looking at what they check; None if they did."""
    if family == "input":
        return None
    inputs = [f for f in result.findings if f.family == "input"]
    not_checked = [f for f in inputs if f.code == CouldNotCheck.code and _checked_family(f) == family]
    if not_checked:
        return "; ".join(f.message for f in not_checked)
    blockers = [f for f in inputs if f.code != CouldNotCheck.code]
    if family not in result.families:
        return _because("not run", blockers)
    if result.format is None:
        return _because("the checkpoint could not be read", _with_codes(blockers, inputs_module.CheckpointUnreadable))
    if family in _NEEDS_MANIFEST and result.manifest is None:
        manifest_rules = (inputs_module.ManifestMissing, inputs_module.ManifestInvalid)
        return _because("no manifest to check against", _with_codes(blockers, *manifest_rules))
    if family in _NEEDS_SPEC and result.spec is None:
        return _because("no spec to check against", _with_codes(blockers, inputs_module.SpecMissing))
    return None


def _with_codes(findings: list[Finding], *rules: Rule) -> list[Finding]:
    """The findings of `rules` among `findings`, or all of them when none is."""
    return [f for f in findings if f.code in {rule.code for rule in rules}] or findings


def _because(what: str, findings: list[Finding]) -> str:
    return f"{what}: {_headline(findings)}" if findings else what


def _checked_family(finding: Finding) -> Family | None:
    rule = rule_by_code(finding.message.split(" ", 1)[0])
    return rule.family if rule is not None else None


def _headline(errors: list[Finding]) -> str:
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{errors[0].code} {errors[0].name}: {printable(errors[0].message)}{more}"


def _line(finding: Finding) -> str:
    where = f" {printable(finding.location)}:" if finding.location else ""
    return f"{finding.code} [{finding.severity}] {finding.name}{where} {printable(finding.message, newlines=True)}"
