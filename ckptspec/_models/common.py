from enum import Enum
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field

SchemaVersionField = Annotated[
    str,
    Field(
        pattern=r"^1\.(0|[1-9][0-9]*)$",
        description="Schema version of the document, MAJOR.MINOR, quoted. Readers accept every minor up to their own.",
    ),
]

Scalar = Union[bool, int, float, str, None]
"""A JSON scalar; recorded constants and hyperparameters are kept to these so any tool can compare them."""

JSONValue = Any
"""Nested JSON data (mappings, lists, scalars)."""

Hex8 = Annotated[str, Field(pattern=r"^[0-9a-f]{8}$", description="CRC32C as 8 lowercase hex digits.")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 as 64 lowercase hex digits.")]
FilePath = Annotated[str, Field(min_length=1, pattern=r"^[^\x00]+$")]
"""A file's path as a document records it: never empty, and never with the NUL byte no file system allows."""
Location = Annotated[
    str,
    Field(
        pattern=r"^(/([^~/]|~[01])*)*$",
        description=(
            "JSON Pointer (RFC 6901) into the checkpoint's object tree, '' for the root. "
            "For TensorFlow bundles the tree is the mapping of bundle keys."
        ),
    ),
]


def empty_list() -> list[Any]:
    """`default_factory` of the list fields. pydantic reads each default factory's signature while it
    builds a model: the builtins `list` and `dict` carry theirs as text, which `inspect` parses with
    the tokenizer (about 1.5 % of the instructions of validating a small checkpoint), where a
    function's comes from its code."""
    return []


def empty_dict() -> dict[str, Any]:
    """`default_factory` of the mapping fields; see `empty_list`."""
    return {}


class StrictModel(BaseModel):
    """Base of every document model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, validate_default=True, use_enum_values=True, defer_build=True
    )


class DType(str, Enum):
    """Element types, named as torch names them; TensorFlow types map onto the same names."""

    bool = "bool"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    int4 = "int4"
    uint4 = "uint4"
    int2 = "int2"
    uint2 = "uint2"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2fnuz = "float8_e5m2fnuz"
    float8_e4m3b11fnuz = "float8_e4m3b11fnuz"
    float8_e8m0fnu = "float8_e8m0fnu"
    float4_e2m1fn_x2 = "float4_e2m1fn_x2"
    float4_e2m1fn = "float4_e2m1fn"
    complex32 = "complex32"
    complex64 = "complex64"
    complex128 = "complex128"
    qint8 = "qint8"
    quint8 = "quint8"
    qint16 = "qint16"
    quint16 = "quint16"
    qint32 = "qint32"
    quint4x2 = "quint4x2"
    quint2x4 = "quint2x4"
    bits8 = "bits8"
    bits16 = "bits16"
    bits1x8 = "bits1x8"
    bits2x4 = "bits2x4"
    bits4x2 = "bits4x2"
    string = "string"
    variant = "variant"
    resource = "resource"
