"""Every error ckptspec raises derives from one root.

    CkptspecError
    ├── DocumentError            a spec or manifest file that cannot be used
    │   ├── YAMLSyntaxError      not YAML, duplicate keys, unsafe tags
    │   ├── SchemaValidationError  YAML that breaks the schema (carries every issue)
    │   └── UnsupportedVersionError  a `ckptspec:` version this release cannot read
    ├── ReaderError              a checkpoint file that cannot be read
    │   ├── UnsupportedFormatError  recognised, but not something ckptspec reads (yet)
    │   └── CorruptCheckpointError  truncated, malformed or inconsistent bytes
    │       └── AmbiguousArchiveError  a zip whose layout lets readers disagree on its contents
    ├── WriteError               a file that could not be written (the old one is untouched)
    └── AdapterError             raised by the framework adapters
        └── RestoreError         a restore that would silently differ from what was saved

Messages always start with the file they are about, so the CLI can print them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._dataclass import dataclass
from ._pointer import document_path

if TYPE_CHECKING:
    from .formats import GlobalRef

__all__ = [
    "AdapterError",
    "AmbiguousArchiveError",
    "CkptspecError",
    "CorruptCheckpointError",
    "DocumentError",
    "Issue",
    "ReaderError",
    "RestoreError",
    "RestoreNote",
    "SchemaValidationError",
    "UnsupportedFormatError",
    "UnsupportedVersionError",
    "WriteError",
    "YAMLSyntaxError",
]


class CkptspecError(Exception):
    """The root of every error raised by ckptspec."""


class DocumentError(CkptspecError):
    """A spec or manifest document that cannot be used."""


class YAMLSyntaxError(DocumentError):
    """The file is not valid YAML, repeats a key, or uses a tag the safe loader refuses."""


@dataclass(frozen=True)
class Issue:
    """One schema violation: where it is in the document and in the file, and what is wrong."""

    path: tuple[str | int, ...]
    message: str
    line: int | None = None
    column: int | None = None

    @property
    def dotted_path(self) -> str:
        return document_path(self.path) or "<document>"

    def render(self, file: str | Path | None) -> str:
        where = str(file) if file is not None else "<string>"
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        return f"{where}: {self.dotted_path}: {self.message}"


class SchemaValidationError(DocumentError):
    """The document is YAML but breaks the schema; `issues` lists every violation."""

    def __init__(self, file: str | Path | None, issues: list[Issue]) -> None:
        self.file = file
        self.issues = issues
        super().__init__("\n".join(issue.render(file) for issue in issues))


class UnsupportedVersionError(DocumentError):
    """The document declares a schema version this release cannot read or migrate."""


class ReaderError(CkptspecError):
    """A checkpoint that cannot be read; `globals` are the pickle globals its bytes name all the same
    (what loading it would call), so that a refusal still names its dangers."""

    def __init__(self, message: str, *, globals_named: Sequence[GlobalRef] = ()) -> None:
        super().__init__(message)
        self.globals = list(globals_named)


class UnsupportedFormatError(ReaderError):
    """A file ckptspec recognises but does not read, or does not recognise at all."""


class CorruptCheckpointError(ReaderError):
    """Bytes that are truncated, malformed or contradict themselves."""


class AmbiguousArchiveError(CorruptCheckpointError):
    """A zip archive laid out so that two readers can find different records in it (hidden bytes,
    duplicate names, end records pointing elsewhere): what ckptspec reads may not be what torch loads."""


class WriteError(CkptspecError):
    """A file could not be written; whatever was there before is untouched."""


class AdapterError(CkptspecError):
    """Raised by the framework adapters."""


class RestoreError(AdapterError):
    """A restore that would load without error yet differ from the run that was saved."""


class RestoreNote(UserWarning):
    """A difference a restore accepted; the same text is in `RestoreReport.notes`."""
