"""Schema versions and the migration path between majors.

A document's `ckptspec:` field is "MAJOR.MINOR". Within a major, changes are additive (a new
optional field bumps the minor), so a reader accepts every minor up to its own. A newer minor or
major is refused with a request to upgrade. An older major is migrated step by step (N → N+1) by
the functions in a `MigrationRegistry` before validation. The rules are in docs/versioning.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ._dataclass import dataclass
from ._exceptions import UnsupportedVersionError
from ._document_values import SCHEMA_VERSION

__all__ = ["Migration", "MigrationRegistry", "SchemaVersion", "default_registry"]

_VERSION = re.compile(r"^(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})$")

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""Takes a document of major N (already parsed) and returns the same document in major N + 1."""


@dataclass(frozen=True, order=True)
class SchemaVersion:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> SchemaVersion:
        match = _VERSION.match(text)
        if match is None:
            shown = text if len(text) <= 20 else text[:17] + "..."
            raise ValueError(f"{shown!r} is not a schema version of the form MAJOR.MINOR")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


CURRENT = SchemaVersion.parse(SCHEMA_VERSION)


@dataclass
class MigrationRegistry:
    """Functions that lift a document from one major to the next, keyed by the major they read."""

    steps: dict[int, Migration] = field(default_factory=dict)

    def register(self, from_major: int) -> Callable[[Migration], Migration]:
        def decorator(function: Migration) -> Migration:
            if from_major in self.steps:
                raise ValueError(f"a migration from major {from_major} is already registered")
            self.steps[from_major] = function
            return function

        return decorator

    def upgrade(self, document: dict[str, Any], version: SchemaVersion) -> dict[str, Any]:
        """Return `document` (written at `version`) lifted to the current schema version.

        Raises `UnsupportedVersionError` saying why not; the caller adds where the version is written.
        """
        if version > CURRENT:
            raise UnsupportedVersionError(
                f"written for ckptspec schema {version}, newer than the {CURRENT} this release reads; upgrade ckptspec"
            )
        major = version.major
        while major < CURRENT.major:
            step = self.steps.get(major)
            if step is None:
                raise UnsupportedVersionError(f"schema {version} cannot be migrated: no migration from major {major}")
            document = step(dict(document))
            major += 1
        if version.major < CURRENT.major:
            document["ckptspec"] = SCHEMA_VERSION
        return document


default_registry = MigrationRegistry()
"""Schema 1 is the first published major, so nothing is registered yet."""
