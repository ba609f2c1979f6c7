"""ckptspec: declare, record and enforce what a training checkpoint must contain.

The root namespace is deliberately small. The framework adapters, `ckptspec.torch`,
`ckptspec.lightning` and `ckptspec.tensorflow`, are never imported here, so the core runs without
torch or TensorFlow.
"""

from ._documents import (
    dump_document,
    load_document,
    load_manifest,
    load_spec,
    manifest_path_for,
    parse_document,
    save_document,
    spec_digest,
)
from ._exceptions import (
    AdapterError,
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
from ._models import SCHEMA_VERSION, Manifest, Spec
from ._version import __version__
from .formats.detect import inspect_checkpoint

__all__ = [
    "AdapterError",
    "CkptspecError",
    "CorruptCheckpointError",
    "DocumentError",
    "Manifest",
    "ReaderError",
    "RestoreError",
    "SCHEMA_VERSION",
    "SchemaValidationError",
    "Spec",
    "UnsupportedFormatError",
    "UnsupportedVersionError",
    "WriteError",
    "YAMLSyntaxError",
    "__version__",
    "dump_document",
    "inspect_checkpoint",
    "load_document",
    "load_manifest",
    "load_spec",
    "manifest_path_for",
    "parse_document",
    "save_document",
    "spec_digest",
]
