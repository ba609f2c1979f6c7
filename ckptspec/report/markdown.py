"""Markdown: for pull-request comments and CI job summaries."""

from __future__ import annotations

from .._printable import markdown_code, markdown_text
from .._result import Report
from ._summary import summarize

__all__ = ["render_markdown"]


def render_markdown(report: Report) -> str:
    summary = summarize(report)
    lines = [
        f"## ckptspec: {'passed' if report.passed else 'failed'}",
        "",
        summary.line,
        "",
        "| checkpoint | format | errors | warnings | result |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for result in report.results:
        verdict = "✅ ok" if result.passed else "❌ fail"
        lines.append(f"| {markdown_code(result.checkpoint)} | {result.format or '-'} | {result.count('error')} | {result.count('warning')} | {verdict} |")
    findings = report.findings
    if findings:
        lines += ["", "| rule | severity | checkpoint | where | message |", "| --- | --- | --- | --- | --- |"]
        for finding in findings:
            where = markdown_code(finding.location) if finding.location else ""
            checkpoint = markdown_code(finding.checkpoint)
            message = markdown_text(finding.message)
            lines.append(f"| `{finding.code}` {finding.name} | {finding.severity} | {checkpoint} | {where} | {message} |")
    return "\n".join(lines) + "\n"
