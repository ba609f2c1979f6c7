"""A minimal protocol-buffers wire-format decoder, so the readers need no protobuf package.

It knows the four wire types a checkpoint uses (varint, fixed64, length-delimited, fixed32) and
nothing about schemas: callers pick fields by number and interpret them.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = [
    "FIXED32",
    "FIXED64",
    "LENGTH_DELIMITED",
    "VARINT",
    "Field",
    "ProtobufDecodeError",
    "as_int32",
    "as_int64",
    "iter_fields",
    "read_varint",
    "unpack_varints",
]

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5

_MAX_VARINT_BYTES = 10

FieldValue = int | bytes
Field = tuple[int, int, FieldValue]
"""(field number, wire type, value): an int for numeric wire types, bytes for length-delimited."""


class ProtobufDecodeError(ValueError):
    """Bytes that are not a well-formed protocol-buffers message."""


def read_varint(buffer: bytes | memoryview, position: int) -> tuple[int, int]:
    """Decode the LEB128 varint at `position`; return it and the position just after it."""
    result = 0
    for index in range(_MAX_VARINT_BYTES):
        if position + index >= len(buffer):
            raise ProtobufDecodeError(f"varint runs past the end of the data at byte {position}")
        byte = buffer[position + index]
        result |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            if result >> 64:
                raise ProtobufDecodeError(f"varint at byte {position} does not fit in 64 bits")
            return result, position + index + 1
    raise ProtobufDecodeError(f"varint longer than {_MAX_VARINT_BYTES} bytes at byte {position}")


def iter_fields(message: bytes | memoryview) -> Iterator[Field]:
    """Yield every field of a serialized message in wire order; repeated fields appear once per value."""
    position = 0
    end = len(message)
    while position < end:
        tag, position = read_varint(message, position)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufDecodeError(f"field number 0 at byte {position}")
        value: FieldValue
        if wire_type == VARINT:
            value, position = read_varint(message, position)
        elif wire_type == FIXED64:
            value, position = _read_fixed(message, position, 8)
        elif wire_type == FIXED32:
            value, position = _read_fixed(message, position, 4)
        elif wire_type == LENGTH_DELIMITED:
            length, position = read_varint(message, position)
            if position + length > end:
                raise ProtobufDecodeError(f"field {number} claims {length} bytes past the end of the message")
            value = bytes(message[position : position + length])
            position += length
        else:
            raise ProtobufDecodeError(f"field {number} has unsupported wire type {wire_type}")
        yield number, wire_type, value


def _read_fixed(message: bytes | memoryview, position: int, width: int) -> tuple[int, int]:
    if position + width > len(message):
        raise ProtobufDecodeError(f"fixed{width * 8} field runs past the end of the message")
    return int.from_bytes(message[position : position + width], "little"), position + width


def unpack_varints(packed: bytes) -> list[int]:
    """Decode a packed repeated varint field."""
    values = []
    position = 0
    while position < len(packed):
        value, position = read_varint(packed, position)
        values.append(value)
    return values


def as_int64(value: int) -> int:
    """Reinterpret a decoded varint as a two's-complement int64 (proto `int64`)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def as_int32(value: int) -> int:
    """Reinterpret a decoded varint as an int32; negative int32s are sign-extended to 64 bits on the wire."""
    value &= (1 << 32) - 1
    return value - (1 << 32) if value >= 1 << 31 else value
