"""Counts every renderer shows the same way."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import Report, severity_counts

__all__ = ["Summary", "summarize"]


@dataclass(frozen=True)
class Summary:
    checkpoints: int
    passed: int
    failed: int
    errors: int
    warnings: int
    infos: int

    def to_json(self) -> dict[str, int]:
        return {
            "checkpoints": self.checkpoints,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "warnings": self.warnings,
            "infos": self.infos,
        }

    @property
    def line(self) -> str:
        return (
            f"{self.checkpoints} checkpoint{'s' if self.checkpoints != 1 else ''}: {self.passed} passed, "
            f"{self.failed} failed; {self.errors} errors, {self.warnings} warnings"
        )


def summarize(report: Report) -> Summary:
    passed = sum(1 for result in report.results if result.passed)
    counts = severity_counts(report.findings)
    return Summary(
        checkpoints=len(report.results),
        passed=passed,
        failed=len(report.results) - passed,
        errors=counts["error"],
        warnings=counts["warning"],
        infos=counts["info"],
    )
