"""The records of a bundle's `.index` SSTable and the keys they are stored under.

The key `""` holds a `BundleHeaderProto` (decoded to `BundleHeader`); each tensor name holds a
`BundleEntryProto` (`BundleEntry`), whose `TensorSliceProto`s describe a partitioned tensor; each
stored slice of one has an entry of its own under the binary key `encode_slice_key` builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Literal

from .._dataclass import dataclass
from .._pointer import join_pointer
from ._protobuf import LENGTH_DELIMITED, ProtobufDecodeError, as_int32, as_int64, iter_fields, unpack_varints
from ._tf_dtypes import DataType, data_type
from ._tf_objects import COMPONENT_OF_ROLE, Role

__all__ = [
    "BundleEntry",
    "BundleHeader",
    "SliceExtent",
    "TensorSlice",
    "decode_entry",
    "decode_header",
    "encode_slice_key",
]


@dataclass(frozen=True)
class BundleHeader:
    num_shards: int
    endianness: Literal["little", "big"]
    producer: int
    min_consumer: int
    bad_consumers: tuple[int, ...] = ()

    @property
    def byte_order(self) -> Literal["<", ">"]:
        return "<" if self.endianness == "little" else ">"


@dataclass(frozen=True)
class SliceExtent:
    start: int
    length: int | None
    """None means the whole dimension."""


@dataclass(frozen=True)
class TensorSlice:
    extents: tuple[SliceExtent, ...]

    def bounds(self, shape: Sequence[int]) -> list[tuple[int, int]]:
        """(start, stop) per dimension of a tensor of `shape`."""
        return [
            (extent.start, extent.start + extent.length if extent.length is not None else size)
            for extent, size in zip(self.extents, shape)
        ]

    def spec(self, shape: Sequence[int]) -> str:
        return ",".join(f"{start}:{stop}" for start, stop in self.bounds(shape))


@dataclass(frozen=True)
class BundleEntry:
    """One tensor of the bundle: its `BundleEntryProto` plus where it sits in the object graph."""

    key: str
    dtype: DataType
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    """The stored checksum, masked as on disk."""
    slices: tuple[TensorSlice, ...] = ()
    """Non-empty for a partitioned tensor; then shard_id, offset, size and crc32c are meaningless."""
    object_path: str = ""
    role: Role = "other"

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def is_sliced(self) -> bool:
        return bool(self.slices)

    @property
    def nbytes(self) -> int:
        if self.dtype.itemsize is not None:
            return self.numel * self.dtype.itemsize
        return self.size

    @property
    def component(self) -> str | None:
        return COMPONENT_OF_ROLE.get(self.role)

    @property
    def pointer(self) -> str:
        """JSON Pointer of the key in the flat key → tensor mapping."""
        return join_pointer([self.key])


def decode_header(value: bytes) -> BundleHeader:
    num_shards, endianness, producer, min_consumer = 0, 0, 0, 0
    bad_consumers: list[int] = []
    for number, _wire_type, field_value in iter_fields(value):
        if number == 1 and isinstance(field_value, int):
            num_shards = as_int32(field_value)
        elif number == 2 and isinstance(field_value, int):
            endianness = field_value
        elif number == 3 and isinstance(field_value, bytes):
            for sub_number, sub_wire, sub_value in iter_fields(field_value):
                if sub_number == 1 and isinstance(sub_value, int):
                    producer = as_int32(sub_value)
                elif sub_number == 2 and isinstance(sub_value, int):
                    min_consumer = as_int32(sub_value)
                elif sub_number == 3:
                    bad_consumers += _repeated_ints(sub_wire, sub_value)
    if endianness not in (0, 1):
        raise ProtobufDecodeError(f"unknown endianness {endianness}")
    return BundleHeader(
        num_shards, "little" if endianness == 0 else "big", producer, min_consumer, tuple(bad_consumers)
    )


def _repeated_ints(wire_type: int, value: int | bytes) -> list[int]:
    if wire_type == LENGTH_DELIMITED and isinstance(value, bytes):
        return [as_int32(item) for item in unpack_varints(value)]
    return [as_int32(int(value))] if isinstance(value, int) else []


def decode_entry(key: str, value: bytes) -> BundleEntry:
    dtype_enum, shard_id, offset, size, crc = 0, 0, 0, 0, 0
    shape: tuple[int, ...] = ()
    slices: list[TensorSlice] = []
    for number, _wire, field_value in iter_fields(value):
        if isinstance(field_value, bytes):
            if number == 2:
                shape = _decode_shape(field_value)
            elif number == 7:
                slices.append(_decode_slice(field_value))
        elif number == 1:
            dtype_enum = field_value
        elif number == 3:
            shard_id = as_int32(field_value)
        elif number == 4:
            offset = as_int64(field_value)
        elif number == 5:
            size = as_int64(field_value)
        elif number == 6:
            crc = field_value
    return BundleEntry(key, data_type(dtype_enum), shape, shard_id, offset, size, crc, tuple(slices))


MAX_RANK = 254
"""TensorFlow's own limit on a tensor's number of dimensions (`TensorShape::MaxDimensions`)."""


def _decode_shape(value: bytes) -> tuple[int, ...]:
    dims = []
    for number, _wire, field_value in iter_fields(value):
        if len(dims) > MAX_RANK:
            raise ProtobufDecodeError(f"invalid tensor shape: more than {MAX_RANK} dimensions")
        if number == 3 and field_value:
            raise ProtobufDecodeError("shape of unknown rank")
        if number == 2 and isinstance(field_value, bytes):
            size = 0
            for dim_number, _dim_wire, dim_value in iter_fields(field_value):
                if dim_number == 1 and isinstance(dim_value, int):
                    size = as_int64(dim_value)
            if size < 0:
                raise ProtobufDecodeError(f"invalid tensor shape: dimension of size {size}")
            dims.append(size)
    return tuple(dims)


def _decode_slice(value: bytes) -> TensorSlice:
    extents = []
    for number, _wire, field_value in iter_fields(value):
        if len(extents) > MAX_RANK:
            raise ProtobufDecodeError(f"invalid tensor slice: more than {MAX_RANK} dimensions")
        if number == 1 and isinstance(field_value, bytes):
            start, length = 0, None
            for extent_number, _extent_wire, extent_value in iter_fields(field_value):
                if extent_number == 1 and isinstance(extent_value, int):
                    start = as_int64(extent_value)
                elif extent_number == 2 and isinstance(extent_value, int):
                    length = as_int64(extent_value)
            extents.append(SliceExtent(start, length))
    return TensorSlice(tuple(extents))


# Slice keys: tensorflow/core/util/saved_tensor_slice_util.cc (EncodeTensorNameSlice, OrderedCode)


def encode_slice_key(name: str, tensor_slice: TensorSlice) -> bytes:
    """The index key TensorFlow stores one slice of partitioned tensor `name` under."""
    key = _ordered_unsigned(0) + _ordered_string(name.encode()) + _ordered_unsigned(len(tensor_slice.extents))
    for extent in tensor_slice.extents:
        key += _ordered_signed(extent.start) + _ordered_signed(-1 if extent.length is None else extent.length)
    return key


def _ordered_unsigned(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([len(body)]) + body


def _ordered_string(value: bytes) -> bytes:
    escaped = bytearray()
    for byte in value:
        if byte == 0x00:
            escaped += b"\x00\xff"
        elif byte == 0xFF:
            escaped += b"\xff\x00"
        else:
            escaped.append(byte)
    return bytes(escaped) + b"\x00\x01"


def _ordered_signed(value: int) -> bytes:
    magnitude = ~value if value < 0 else value
    length = magnitude.bit_length() // 7 + 1
    encoded = bytearray(value.to_bytes(length, "big", signed=True))
    # The leading `length` bits are set to flag the length, XOR-ed in so that negative numbers
    # (leading ones in two's complement) get zeros there and sort before positive ones.
    header = ((1 << length) - 1) << (16 - length)
    encoded[0] ^= header >> 8
    if length > 1:
        encoded[1] ^= header & 0xFF
    return bytes(encoded)
