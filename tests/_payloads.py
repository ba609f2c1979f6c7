"""A pickle payload for the safety tests: unpickled by a real unpickler, it runs a shell command."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SystemCall:
    """Pickles as `os.system(command)`; tests point `command` at a marker file that must never appear."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
        return os.system, (self.command,)


def plant(paths: list[Path], marker: Path) -> None:
    """Write the payload into each of `paths`, and show on the first that the trap is real: a real
    unpickler pointed at it runs the command (which creates `marker`, removed again)."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(SystemCall(f"touch {marker}")))
    with paths[0].open("rb") as handle:
        pickle.load(handle)
    assert marker.exists()
    marker.unlink()


def judged_dangerous(report: Any, path: Path) -> bool:
    """Whether the audit `report` judged the file at `path` on its own and named the payload's call."""
    results = [result for result in report.results if Path(result.checkpoint) == path]
    return any(finding.code == "CKS401" and "system" in finding.message for result in results for finding in result.findings)
