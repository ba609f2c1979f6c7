"""Counts every renderer shows the same way."""

from __future__ import annotations


from .._dataclass import dataclass
from .._result import Report, Result, severity_counts
from ..checks.paths import FileSkipped

__all__ = ["Summary", "summarize"]


@dataclass(frozen=True)
class Summary:
    checkpoints: int
    """Results for checkpoints and for files that may be one; not files that hold no checkpoint format."""
    not_checkpoints: int
    """Files listed because they hold no checkpoint format (CKS015), each with its info finding."""
    passed: int
    failed: int
    errors: int
    warnings: int
    infos: int

    def to_json(self) -> dict[str, int]:
        return {
            "checkpoints": self.checkpoints,
            "not_checkpoints": self.not_checkpoints,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "warnings": self.warnings,
            "infos": self.infos,
        }

    @property
    def line(self) -> str:
        others = f"; {self.not_checkpoints} other file{'s' if self.not_checkpoints != 1 else ''} listed" if self.not_checkpoints else ""
        return (
            f"{self.checkpoints} checkpoint{'s' if self.checkpoints != 1 else ''}: {self.passed} passed, "
            f"{self.failed} failed; {self.errors} errors, {self.warnings} warnings{others}"
        )


def summarize(report: Report) -> Summary:
    checkpoints = [result for result in report.results if not _not_a_checkpoint(result)]
    passed = sum(1 for result in checkpoints if result.passed)
    counts = severity_counts(report.findings)
    return Summary(
        checkpoints=len(checkpoints),
        not_checkpoints=len(report.results) - len(checkpoints),
        passed=passed,
        failed=len(checkpoints) - passed,
        errors=counts["error"],
        warnings=counts["warning"],
        infos=counts["info"],
    )


def _not_a_checkpoint(result: Result) -> bool:
    return result.format is None and bool(result.findings) and all(finding.code == FileSkipped.code for finding in result.findings)
