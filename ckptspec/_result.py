"""What a validation found: one checkpoint's `Result`, a run's `Report`, and the counts by severity."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import field
from pathlib import Path
from typing import get_args

from ._dataclass import dataclass
from ._exit import EXIT_CLEAN, EXIT_FINDINGS
from .checks import Family, Finding, Severity

__all__ = ["Executor", "Judge", "Report", "Result", "severity_counts"]


@dataclass
class Result:
    """Everything one validation found about one checkpoint."""

    checkpoint: str
    format: str | None
    manifest: str | None
    spec: str | None
    """The name of the spec it was judged against."""
    findings: list[Finding] = field(default_factory=list)
    families: tuple[Family, ...] = ()
    """The families whose checks ran (a crash inside one is a finding of its own)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def passed(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.passed else EXIT_FINDINGS

    def count(self, severity: Severity) -> int:
        return severity_counts(self.findings)[severity]

    def to_json(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "format": self.format,
            "manifest": self.manifest,
            "spec": self.spec,
            "passed": self.passed,
            "counts": severity_counts(self.findings),
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass
class Report:
    """The results of one run over one or more checkpoints, in discovery order."""

    results: list[Result]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.passed else EXIT_FINDINGS

    @property
    def findings(self) -> list[Finding]:
        return [finding for result in self.results for finding in result.findings]


def severity_counts(findings: Iterable[Finding]) -> dict[Severity, int]:
    """How many of `findings` there are of each severity, every severity named, most severe first."""
    counts: dict[Severity, int] = {severity: 0 for severity in get_args(Severity)}
    for finding in findings:
        counts[finding.severity] += 1
    return counts


Judge = Callable[[Path], Result]
"""Validation of one checkpoint under one policy: `_validate_or_report` with the spec, trust and
`require_spec` bound (a partial, so that it travels to worker processes)."""
Executor = Callable[[list[Path], Judge, int], Iterator[tuple[Path, Result]]]
"""Runs `judge` on each checkpoint with `jobs` workers, yielding each result as it is done, in any order."""
