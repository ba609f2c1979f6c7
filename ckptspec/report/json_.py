"""JSON: the stable machine-readable report (keys are only ever added; see docs/validate.md)."""

from __future__ import annotations

from .._json_text import indented_json
from .._version import __version__
from .._result import Report
from ._summary import summarize

__all__ = ["JSON_REPORT_VERSION", "render_json"]

JSON_REPORT_VERSION = 1


def render_json(report: Report) -> str:
    document = {
        "report": JSON_REPORT_VERSION,
        "tool": {"name": "ckptspec", "version": __version__},
        "passed": report.passed,
        "summary": summarize(report).to_json(),
        "results": [result.to_json() for result in report.results],
    }
    return indented_json(document) + "\n"
