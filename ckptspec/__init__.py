"""ckptspec: declare, record and enforce what a training checkpoint must contain.

The root namespace is deliberately small. The framework adapters, `ckptspec.torch`,
`ckptspec.lightning` and `ckptspec.tensorflow`, are never imported here, so the core runs without
torch or TensorFlow. Names are imported on first use, so reading a checkpoint does not pay for the
document models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._exceptions import (
    AdapterError,
    AmbiguousArchiveError,
    CkptspecError,
    CorruptCheckpointError,
    DocumentError,
    ReaderError,
    RestoreError,
    SchemaValidationError,
    UnsupportedFormatError,
    UnsupportedVersionError,
    WriteError,
    YAMLSyntaxError,
)
from ._version import __version__

if TYPE_CHECKING:
    from ._documents import dump_document, load_document, load_manifest, load_spec, parse_document, save_document, spec_digest
    from ._sidecars import manifest_path_for
    from ._models import SCHEMA_VERSION, Manifest, Spec
    from ._validate import audit, validate
    from ._result import Report, Result
    from .formats.inspect import inspect_checkpoint

_LAZY = {
    "Report": "._result",
    "Result": "._result",
    "audit": "._validate",
    "validate": "._validate",
    "SCHEMA_VERSION": "._models",
    "Manifest": "._models",
    "Spec": "._models",
    "dump_document": "._documents",
    "inspect_checkpoint": ".formats.inspect",
    "load_document": "._documents",
    "load_manifest": "._documents",
    "load_spec": "._documents",
    "manifest_path_for": "._sidecars",
    "parse_document": "._documents",
    "save_document": "._documents",
    "spec_digest": "._documents",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ckptspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AdapterError",
    "AmbiguousArchiveError",
    "CkptspecError",
    "CorruptCheckpointError",
    "DocumentError",
    "Manifest",
    "ReaderError",
    "Report",
    "RestoreError",
    "Result",
    "SCHEMA_VERSION",
    "SchemaValidationError",
    "Spec",
    "UnsupportedFormatError",
    "UnsupportedVersionError",
    "WriteError",
    "YAMLSyntaxError",
    "__version__",
    "audit",
    "dump_document",
    "inspect_checkpoint",
    "load_document",
    "load_manifest",
    "load_spec",
    "manifest_path_for",
    "parse_document",
    "save_document",
    "spec_digest",
    "validate",
]
