"""Values of the documents that code compares with, importable without the document models."""

from enum import Enum

__all__ = ["SCHEMA_VERSION", "Requirement"]

SCHEMA_VERSION = "1.2"
"""The schema version this release writes: MAJOR.MINOR (see docs/versioning.md)."""


class Requirement(str, Enum):
    required = "required"
    optional = "optional"
    forbidden = "forbidden"
