"""Plain text: one line per finding, grouped by checkpoint, then a summary table."""

from __future__ import annotations

from .._printable import printable
from .._result import Report, Result
from ._summary import summarize

__all__ = ["render_text"]


def render_text(report: Report) -> str:
    lines: list[str] = []
    for result in report.results:
        lines += _result_lines(result)
    if len(report.results) > 1:
        lines += ["", *_table(report)]
    lines += ["", summarize(report).line]
    return "\n".join(lines) + "\n"


def _result_lines(result: Result) -> list[str]:
    status = "ok" if result.passed else "FAIL"
    described = f" ({result.format}, spec {printable(result.spec)})" if result.format and result.spec else ""
    lines = [f"{printable(result.checkpoint)}: {status}{described}"]
    for finding in result.findings:
        where = f" {printable(finding.location)}:" if finding.location and not finding.message.startswith(finding.location) else ""
        lines.append(f"  {finding.code} [{finding.severity}] {finding.name}{where} {printable(finding.message)}")
    return lines


def _table(report: Report) -> list[str]:
    rows = [("checkpoint", "format", "errors", "warnings", "result")]
    for result in report.results:
        rows.append(
            (
                printable(result.checkpoint),
                result.format or "-",
                str(result.count("error")),
                str(result.count("warning")),
                "ok" if result.passed else "FAIL",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
