"""What every check receives: the checkpoint, its manifest and spec (each may be absent), and the view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._dataclass import dataclass
from ._registry import Finding, Rule, Severity
from .._views.base import CheckpointView
from .inputs import CouldNotCheck

if TYPE_CHECKING:
    from .._models import Manifest, Spec

__all__ = ["Context"]


@dataclass
class Context:
    checkpoint: Path
    """The checkpoint file or TensorFlow prefix."""
    manifest_path: Path | None
    manifest: Manifest | None
    spec: Spec | None
    view: CheckpointView | None
    """None when the checkpoint could not be read; checks that need it then yield nothing, because
    the unreadable checkpoint is itself a finding."""

    @property
    def base(self) -> Path:
        """The directory a manifest's relative paths start from."""
        return (self.manifest_path or self.checkpoint).parent

    def finding(
        self,
        rule: Rule,
        message: str,
        *,
        file: Path | str | None = None,
        pointer: str | None = None,
        path: tuple[str | int, ...] = (),
        severity: Severity | None = None,
    ) -> Finding:
        return rule.finding(
            message,
            checkpoint=str(self.checkpoint),
            file=str(file) if file is not None else None,
            pointer=pointer,
            path=path,
            severity=severity,
        )

    def not_checked(
        self,
        rule: Rule,
        reason: str,
        *,
        file: Path | str | None = None,
        pointer: str | None = None,
        path: tuple[str | int, ...] = (),
    ) -> Finding:
        """The finding for a check of `rule` that could not look at its subject, and why."""
        return self.finding(CouldNotCheck, f"{rule.code} {rule.name} not checked: {reason}", file=file, pointer=pointer, path=path)
