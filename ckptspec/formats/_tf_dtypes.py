"""TensorFlow data types: the `DataType` table, and how string and variant tensors lay out their bytes.

Plain-old-data tensors are packed elements of `DataType.itemsize` bytes each; string and variant
tensors interleave varint lengths and checksums with their elements, split apart here.
"""

from __future__ import annotations

from dataclasses import replace

from .._dataclass import dataclass
from .._exceptions import CorruptCheckpointError
from ._protobuf import ProtobufDecodeError, read_varint

__all__ = ["DATA_TYPES", "DataType", "data_type", "split_strings", "split_variants", "string_lengths"]


@dataclass(frozen=True)
class DataType:
    """One `tensorflow.DataType` value, named the way torch names dtypes."""

    enum: int
    name: str
    itemsize: int | None
    """Bytes per element on disk, or None for types that are not plain old data (string, variant, resource)."""
    struct_format: str | None = None
    """`struct` code for decoding one element, when Python can decode it natively."""

    @property
    def is_pod(self) -> bool:
        return self.itemsize is not None


def _dtype_table() -> dict[int, DataType]:
    base = [
        DataType(1, "float32", 4, "f"),
        DataType(2, "float64", 8, "d"),
        DataType(3, "int32", 4, "i"),
        DataType(4, "uint8", 1, "B"),
        DataType(5, "int16", 2, "h"),
        DataType(6, "int8", 1, "b"),
        DataType(7, "string", None),
        DataType(8, "complex64", 8, "f"),
        DataType(9, "int64", 8, "q"),
        DataType(10, "bool", 1, "?"),
        DataType(11, "qint8", 1, "b"),
        DataType(12, "quint8", 1, "B"),
        DataType(13, "qint32", 4, "i"),
        DataType(14, "bfloat16", 2, "H"),
        DataType(15, "qint16", 2, "h"),
        DataType(16, "quint16", 2, "H"),
        DataType(17, "uint16", 2, "H"),
        DataType(18, "complex128", 16, "d"),
        DataType(19, "float16", 2, "e"),
        DataType(20, "resource", None),
        DataType(21, "variant", None),
        DataType(22, "uint32", 4, "I"),
        DataType(23, "uint64", 8, "Q"),
        # The narrow types are stored one element per byte, like ml_dtypes' in-memory layout.
        DataType(24, "float8_e5m2", 1, "B"),
        DataType(25, "float8_e4m3fn", 1, "B"),
        DataType(26, "float8_e4m3fnuz", 1, "B"),
        DataType(27, "float8_e4m3b11fnuz", 1, "B"),
        DataType(28, "float8_e5m2fnuz", 1, "B"),
        DataType(29, "int4", 1, "b"),
        DataType(30, "uint4", 1, "B"),
        DataType(31, "int2", 1, "b"),
        DataType(32, "uint2", 1, "B"),
        DataType(33, "float4_e2m1fn", 1, "B"),
    ]
    table = {dtype.enum: dtype for dtype in base}
    # Reference types (DT_FLOAT_REF = 101, ...) hold the same bytes as their value types.
    table.update({dtype.enum + 100: replace(dtype, enum=dtype.enum + 100) for dtype in base})
    return table


DATA_TYPES: dict[int, DataType] = _dtype_table()


def data_type(enum: int) -> DataType:
    """The type of a stored enum value; an unknown value gets an `invalid(N)` type instead of an error."""
    return DATA_TYPES.get(enum) or DataType(enum, f"invalid({enum})", None)


def split_strings(data: bytes, count: int, where: str) -> list[bytes]:
    """The elements of a string tensor: `count` varint lengths, a 4-byte length checksum, then the bytes."""
    lengths, position = string_lengths(data, count, where)
    position += 4
    values = []
    for length in lengths:
        values.append(data[position : position + length])
        position += length
    return values


def string_lengths(data: bytes, count: int, where: str) -> tuple[list[int], int]:
    """The varint lengths that open a string tensor, and the offset just past them."""
    lengths = []
    position = 0
    try:
        for _ in range(count):
            length, position = read_varint(data, position)
            lengths.append(length)
    except ProtobufDecodeError as exc:
        raise CorruptCheckpointError(f"{where}: bad string length: {exc}") from None
    return lengths, position


def split_variants(data: bytes, count: int, where: str) -> list[bytes]:
    """The elements of a variant tensor, each stored as a varint length, the bytes and a 4-byte checksum."""
    values = []
    position = 0
    try:
        for _ in range(count):
            length, position = read_varint(data, position)
            values.append(data[position : position + length])
            position += length + 4
    except ProtobufDecodeError as exc:
        raise CorruptCheckpointError(f"{where}: bad variant length: {exc}") from None
    return values
