"""Read and verify TensorFlow tensor bundles (`PREFIX.index` + `PREFIX.data-NNNNN-of-NNNNN`) without TensorFlow.

The index is an SSTable whose first key, `""`, holds a `BundleHeaderProto` and whose other keys map
tensor names to `BundleEntryProto`s. Data shards are raw concatenated tensor bytes. TF2 bundles add a
`_CHECKPOINTABLE_OBJECT_GRAPH` string tensor that says which object each key belongs to; from it every
key gets an object path and a role (model variable, optimizer slot, RNG state, ...).

The byte-level facts are in docs/formats/tensorflow.md.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from math import prod
from pathlib import Path
from typing import Any, Literal

import crc32c

from .._exceptions import CorruptCheckpointError, ReaderError
from ._inspection import FileSummary, Inspection, TensorSummary
from ._protobuf import (
    LENGTH_DELIMITED,
    ProtobufDecodeError,
    as_int32,
    as_int64,
    iter_fields,
    read_varint,
    unpack_varints,
)
from .sstable import SSTable, mask_crc, unmask_crc

__all__ = [
    "DATA_TYPES",
    "OBJECT_GRAPH_KEY",
    "Bundle",
    "BundleEntry",
    "BundleHeader",
    "BundleProblem",
    "DataType",
    "ObjectGraph",
    "Role",
    "SliceExtent",
    "TensorSlice",
    "TrackableObject",
    "data_file_name",
    "encode_slice_key",
    "inspect_bundle",
    "open_bundle",
    "verify_bundle",
]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
SUPPORTED_BUNDLE_VERSION = 1
_CHUNK_BYTES = 256 << 10
_DATA_FILE = re.compile(r"\.data-(\d{5})-of-(\d{5})$")


# --------------------------------------------------------------------------------------------------
# Data types


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


def _data_type(enum: int) -> DataType:
    return DATA_TYPES.get(enum) or DataType(enum, f"invalid({enum})", None)


# --------------------------------------------------------------------------------------------------
# Protos


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


Role = Literal[
    "model_variable",
    "optimizer_variable",
    "optimizer_slot",
    "optimizer_iterations",
    "learning_rate",
    "save_counter",
    "rng_state",
    "data_iterator",
    "object_graph",
    "other",
]

_COMPONENT_OF_ROLE: dict[str, str] = {
    "model_variable": "model",
    "optimizer_variable": "optimizer",
    "optimizer_slot": "optimizer",
    "optimizer_iterations": "optimizer",
    "learning_rate": "optimizer",
    "rng_state": "rng",
    "data_iterator": "data_position",
}


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
        return _COMPONENT_OF_ROLE.get(self.role)

    @property
    def pointer(self) -> str:
        """JSON Pointer of the key in the flat key → tensor mapping."""
        return "/" + self.key.replace("~", "~0").replace("/", "~1")


def _decode_header(value: bytes) -> BundleHeader:
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


def _decode_entry(key: str, value: bytes) -> BundleEntry:
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
    return BundleEntry(key, _data_type(dtype_enum), shape, shard_id, offset, size, crc, tuple(slices))


def _decode_shape(value: bytes) -> tuple[int, ...]:
    dims = []
    for number, _wire, field_value in iter_fields(value):
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
        if number == 1 and isinstance(field_value, bytes):
            start, length = 0, None
            for extent_number, _extent_wire, extent_value in iter_fields(field_value):
                if extent_number == 1 and isinstance(extent_value, int):
                    start = as_int64(extent_value)
                elif extent_number == 2 and isinstance(extent_value, int):
                    length = as_int64(extent_value)
            extents.append(SliceExtent(start, length))
    return TensorSlice(tuple(extents))


# --------------------------------------------------------------------------------------------------
# Slice keys: tensorflow/core/util/saved_tensor_slice_util.cc (EncodeTensorNameSlice, OrderedCode)


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


def encode_slice_key(name: str, tensor_slice: TensorSlice) -> bytes:
    """The index key TensorFlow stores one slice of partitioned tensor `name` under."""
    key = _ordered_unsigned(0) + _ordered_string(name.encode()) + _ordered_unsigned(len(tensor_slice.extents))
    for extent in tensor_slice.extents:
        key += _ordered_signed(extent.start) + _ordered_signed(-1 if extent.length is None else extent.length)
    return key


# --------------------------------------------------------------------------------------------------
# Object graph: tensorflow/core/protobuf/trackable_object_graph.proto


@dataclass(frozen=True)
class TrackableObject:
    children: tuple[tuple[int, str], ...]
    """(node id, local name) per edge."""
    attributes: tuple[tuple[str, str], ...]
    """(attribute name, checkpoint key) per saved tensor."""
    slot_variables: tuple[tuple[int, str, int], ...]
    """(original variable node id, slot name, slot variable node id)."""


@dataclass(frozen=True)
class ObjectGraph:
    """A decoded `TrackableObjectGraph`; node 0 is the `tf.train.Checkpoint` root."""

    nodes: tuple[TrackableObject, ...]

    @classmethod
    def decode(cls, serialized: bytes) -> ObjectGraph:
        return cls(
            tuple(
                _decode_trackable(value)
                for number, _w, value in iter_fields(serialized)
                if number == 1 and isinstance(value, bytes)
            )
        )

    def node_paths(self) -> dict[int, str]:
        """Each reachable node's path from the root, shortest first as TensorFlow names keys."""
        paths = {0: ""}
        queue = deque([0])
        while queue:
            node_id = queue.popleft()
            for child_id, local_name in self._children(node_id):
                if child_id not in paths:
                    name = local_name.replace(".", "..").replace("/", ".S")
                    paths[child_id] = f"{paths[node_id]}/{name}" if paths[node_id] else name
                    queue.append(child_id)
        return paths

    def roles(self) -> dict[int, Role]:
        """The role of every node that holds tensors, from the kind of objects it is reachable from."""
        reached: dict[int, set[str]] = {}
        seen: set[tuple[int, str]] = set()
        queue: deque[tuple[int, str]] = deque()
        for child_id, local_name in self._children(0):
            queue.append((child_id, self._root_child_label(child_id, local_name)))
        while queue:
            node_id, label = queue.popleft()
            if (node_id, label) in seen:
                continue
            seen.add((node_id, label))
            reached.setdefault(node_id, set()).add(label)
            for child_id, local_name in self._children(node_id):
                queue.append((child_id, self._child_label(label, child_id, local_name)))
        for node in self.nodes:
            for _original, _slot_name, slot_id in node.slot_variables:
                reached.setdefault(slot_id, set()).add("optimizer_slot")
        return {node_id: _strongest_role(labels) for node_id, labels in reached.items()}

    def _children(self, node_id: int) -> tuple[tuple[int, str], ...]:
        if 0 <= node_id < len(self.nodes):
            return tuple(child for child in self.nodes[node_id].children if 0 <= child[0] < len(self.nodes))
        return ()

    def _root_child_label(self, node_id: int, local_name: str) -> str:
        node = self.nodes[node_id]
        kind = self._kind(node_id)
        if kind:
            return kind
        if local_name == "save_counter" and node.attributes:
            return "save_counter"
        return "other" if node.attributes and not node.children else "model_variable"

    def _child_label(self, parent_label: str, node_id: int, local_name: str) -> str:
        kind = self._kind(node_id)
        if kind:
            return kind
        if parent_label.startswith("optimizer"):
            if local_name == "_trainable_variables":
                return "model_variable"
            if local_name in _ITERATION_NAMES:
                return "optimizer_iterations"
            if local_name in _LEARNING_RATE_NAMES:
                return "learning_rate"
            return "optimizer_variable"
        return parent_label

    def _kind(self, node_id: int) -> str | None:
        node = self.nodes[node_id]
        child_names = {name for _child, name in node.children}
        if node.slot_variables or child_names & _ITERATION_NAMES:
            return "optimizer_variable"
        if "_state_var" in child_names:
            return "rng_state"
        if any(name.startswith("ITERATOR") for name, _key in node.attributes):
            return "data_iterator"
        return None


_ITERATION_NAMES = {"_iterations", "iter", "iterations"}
_LEARNING_RATE_NAMES = {"_learning_rate", "learning_rate", "lr"}
# A model's weights are also tracked by its optimizer (Keras 3 `_trainable_variables`): the model wins.
_ROLE_PRIORITY: tuple[Role, ...] = (
    "model_variable",
    "optimizer_slot",
    "optimizer_iterations",
    "learning_rate",
    "optimizer_variable",
    "rng_state",
    "data_iterator",
    "save_counter",
    "other",
)


def _strongest_role(labels: set[str]) -> Role:
    return next(role for role in _ROLE_PRIORITY if role in labels)


def _decode_trackable(serialized: bytes) -> TrackableObject:
    children, attributes, slots = [], [], []
    for number, _wire, value in iter_fields(serialized):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            fields = _message_fields(value)
            children.append((as_int32(int(fields.get(1, 0))), _text(fields.get(2, b""))))
        elif number == 2:
            fields = _message_fields(value)
            attributes.append((_text(fields.get(1, b"")), _text(fields.get(3, b""))))
        elif number == 3:
            fields = _message_fields(value)
            slots.append((as_int32(int(fields.get(1, 0))), _text(fields.get(2, b"")), as_int32(int(fields.get(3, 0)))))
    return TrackableObject(tuple(children), tuple(attributes), tuple(slots))


def _message_fields(serialized: bytes) -> dict[int, int | bytes]:
    """Singular fields of a message by number (the last one wins, as in proto3)."""
    return {number: value for number, _wire, value in iter_fields(serialized)}


def _text(value: int | bytes) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


_TF1_SLOT_SUFFIX = re.compile(
    r"/(Adam|Adam_1|Momentum|RMSProp|RMSProp_1|Adagrad|Adadelta|Adadelta_1|Ftrl|Ftrl_1)(_\d+)?$"
)
_ATTRIBUTE_SEPARATORS = ("/.ATTRIBUTES/", "/.TENSORS/")


def _object_path(key: str) -> str:
    for separator in _ATTRIBUTE_SEPARATORS:
        if separator in key:
            return key.split(separator, 1)[0]
    return key


# --------------------------------------------------------------------------------------------------
# Bundle


def data_file_name(prefix: str | Path, shard_id: int, num_shards: int) -> Path:
    return Path(f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}")


@dataclass
class Bundle:
    """An opened bundle: header, entries in key order, and the object graph when there is one."""

    prefix: Path
    header: BundleHeader
    entries: dict[str, BundleEntry]
    """Logical tensors by key (partitioned tensors once, under their full name)."""
    slice_entries: dict[bytes, BundleEntry]
    """The stored pieces of partitioned tensors, by their binary slice key."""
    object_graph: ObjectGraph | None = None
    object_graph_error: str | None = None
    """Why the object graph could not be read, when a TF2 bundle's graph tensor is damaged."""
    _shard_sizes: dict[int, int | None] = field(default_factory=dict, repr=False)

    @property
    def index_path(self) -> Path:
        return Path(f"{self.prefix}.index")

    def shard_path(self, shard_id: int) -> Path:
        return data_file_name(self.prefix, shard_id, self.header.num_shards)

    def shard_size(self, shard_id: int) -> int | None:
        """Size of a data shard, or None if it is missing."""
        if shard_id not in self._shard_sizes:
            try:
                self._shard_sizes[shard_id] = self.shard_path(shard_id).stat().st_size
            except OSError:
                self._shard_sizes[shard_id] = None
        return self._shard_sizes[shard_id]

    def read_bytes(self, key: str) -> bytes:
        """The stored bytes of a tensor; a partitioned POD tensor is assembled from its slices."""
        entry = self._entry(key)
        if entry.is_sliced:
            return self._assemble(entry)
        return self._read_range(entry)

    def decode(self, key: str) -> list[Any]:
        """Tensor values as a flat row-major list: numbers, bools, or bytes for string and variant tensors.

        bfloat16 decodes to float; the 8-, 4- and 2-bit types decode to their raw stored integers.
        """
        entry = self._entry(key)
        data = self.read_bytes(key)
        if entry.dtype.name == "string":
            return _split_strings(data, entry.numel, f"{self.shard_path(entry.shard_id)}: {key}")
        if entry.dtype.name == "variant":
            return _split_variants(data, entry.numel, f"{self.shard_path(entry.shard_id)}: {key}")
        if entry.dtype.struct_format is None:
            raise ReaderError(f"{self.index_path}: {key}: cannot decode dtype {entry.dtype.name}")
        count = entry.numel * (2 if entry.dtype.name.startswith("complex") else 1)
        values = list(struct.unpack(f"{self.header.byte_order}{count}{entry.dtype.struct_format}", data))
        if entry.dtype.name == "bfloat16":
            return [struct.unpack("<f", struct.pack("<I", bits << 16))[0] for bits in values]
        if entry.dtype.name.startswith("complex"):
            return [complex(real, imag) for real, imag in zip(values[::2], values[1::2])]
        return values

    def verify(self, *, workers: int | None = None) -> list[BundleProblem]:
        """Every problem with the bundle's data: see `verify_bundle`."""
        return _Verifier(self, workers).run()

    def _entry(self, key: str) -> BundleEntry:
        try:
            return self.entries[key]
        except KeyError:
            raise ReaderError(f"{self.index_path}: no tensor named {key!r}") from None

    def _read_range(self, entry: BundleEntry) -> bytes:
        path = self.shard_path(entry.shard_id)
        try:
            with path.open("rb") as handle:
                data = os.pread(handle.fileno(), entry.size, entry.offset)
        except OSError as exc:
            raise ReaderError(f"{path}: {entry.key}: cannot read: {exc.strerror}") from None
        if len(data) != entry.size:
            raise CorruptCheckpointError(
                f"{path}: {entry.key}: bytes {entry.offset}..{entry.offset + entry.size} lie past the end of the file"
            )
        return data

    def _assemble(self, entry: BundleEntry) -> bytes:
        itemsize = entry.dtype.itemsize
        if itemsize is None:
            raise ReaderError(
                f"{self.index_path}: {entry.key}: cannot assemble a partitioned {entry.dtype.name} tensor"
            )
        full = bytearray(entry.numel * itemsize)
        strides = _strides(entry.shape, itemsize)
        for tensor_slice in entry.slices:
            piece = self.slice_entries.get(encode_slice_key(entry.key, tensor_slice))
            if piece is None:
                raise CorruptCheckpointError(
                    f"{self.index_path}: {entry.key}: slice {tensor_slice.spec(entry.shape)} is missing"
                )
            _scatter(full, self._read_range(piece), tensor_slice.bounds(entry.shape), strides, itemsize)
        return bytes(full)


def _strides(shape: Sequence[int], itemsize: int) -> list[int]:
    strides = []
    step = itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def _scatter(full: bytearray, piece: bytes, bounds: list[tuple[int, int]], strides: list[int], itemsize: int) -> None:
    if not bounds:
        full[:] = piece
        return
    run = (bounds[-1][1] - bounds[-1][0]) * itemsize
    outer = [range(start, stop) for start, stop in bounds[:-1]]
    source = 0
    for index in itertools.product(*outer):
        target = sum(i * s for i, s in zip(index, strides)) + bounds[-1][0] * strides[-1]
        full[target : target + run] = piece[source : source + run]
        source += run


def _split_strings(data: bytes, count: int, where: str) -> list[bytes]:
    lengths, position = _string_lengths(data, count, where)
    position += 4
    values = []
    for length in lengths:
        values.append(data[position : position + length])
        position += length
    return values


def _string_lengths(data: bytes, count: int, where: str) -> tuple[list[int], int]:
    lengths = []
    position = 0
    try:
        for _ in range(count):
            length, position = read_varint(data, position)
            lengths.append(length)
    except ProtobufDecodeError as exc:
        raise CorruptCheckpointError(f"{where}: bad string length: {exc}") from None
    return lengths, position


def _split_variants(data: bytes, count: int, where: str) -> list[bytes]:
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


def open_bundle(prefix: str | Path) -> Bundle:
    """Read a bundle's index (verifying every index block) and its object graph.

    Raises `ReaderError` when the index is missing and `CorruptCheckpointError` when it cannot be
    decoded; damage to data shards is left for `Bundle.verify`.
    """
    prefix = Path(prefix)
    index_path = Path(f"{prefix}.index")
    table = SSTable.open(index_path)
    header: BundleHeader | None = None
    entries: dict[str, BundleEntry] = {}
    slice_entries: dict[bytes, BundleEntry] = {}
    for raw_key, value in table.items():
        key = raw_key.decode("utf-8", "surrogateescape")
        try:
            if header is None:
                if raw_key != b"":
                    raise CorruptCheckpointError(f'{index_path}: the first key is {key!r}, not the bundle header ""')
                header = _decode_header(value)
            elif raw_key.startswith(b"\x00"):
                slice_entries[raw_key] = _decode_entry(key, value)
            else:
                entries[key] = _decode_entry(key, value)
        except ProtobufDecodeError as exc:
            what = "bundle header" if not raw_key else f"entry {key!r}"
            raise CorruptCheckpointError(f"{index_path}: {what}: {exc}") from None
    if header is None:
        raise CorruptCheckpointError(f"{index_path}: empty table: no bundle header")
    bundle = Bundle(prefix, header, entries, slice_entries)
    _attach_object_graph(bundle)
    return bundle


def _attach_object_graph(bundle: Bundle) -> None:
    graph_entry = bundle.entries.get(OBJECT_GRAPH_KEY)
    if graph_entry is not None and (graph_entry.dtype.name, graph_entry.shape) != ("string", ()):
        bundle.object_graph_error = f"is a {graph_entry.dtype.name}{list(graph_entry.shape)}, not a scalar string"
    elif graph_entry is not None:
        try:
            (serialized,) = bundle.decode(OBJECT_GRAPH_KEY)
            bundle.object_graph = ObjectGraph.decode(serialized)
        except (ReaderError, ValueError) as exc:
            bundle.object_graph_error = str(exc)
    place = _name_based_placement if bundle.object_graph is None else _graph_placement(bundle.object_graph)
    for key, entry in bundle.entries.items():
        object_path, role = ("", _GRAPH_ROLE) if key == OBJECT_GRAPH_KEY else place(key)
        bundle.entries[key] = replace(entry, object_path=object_path, role=role)


_GRAPH_ROLE: Role = "object_graph"


def _graph_placement(graph: ObjectGraph) -> Callable[[str], tuple[str, Role]]:
    roles = graph.roles()
    node_of_key = {key: node_id for node_id, node in enumerate(graph.nodes) for _name, key in node.attributes}
    node_of_path = {path: node_id for node_id, path in graph.node_paths().items()}

    def place(key: str) -> tuple[str, Role]:
        path = _object_path(key)
        node_id = node_of_key.get(key, node_of_path.get(path))
        return path, roles.get(node_id, "other") if node_id is not None else "other"

    return place


def _name_based_placement(key: str) -> tuple[str, Role]:
    """Roles of TF1 `Saver` keys (bare variable names) and of TF2 keys whose graph is unreadable."""
    if "/.OPTIMIZER_SLOT/" in key or _TF1_SLOT_SUFFIX.search(key):
        return _object_path(key), "optimizer_slot"
    last = key.rsplit("/", 1)[-1]
    if last in ("beta1_power", "beta2_power"):
        return key, "optimizer_variable"
    if last == "global_step":
        return key, "optimizer_iterations"
    return _object_path(key), "model_variable"


# --------------------------------------------------------------------------------------------------
# Verification


@dataclass(frozen=True)
class BundleProblem:
    """One thing wrong with a bundle: the file at fault, the tensor if one is concerned, and what."""

    file: str
    key: str | None
    code: str
    """Stable kebab-case name of the kind of problem, e.g. `checksum-mismatch`."""
    message: str

    def __str__(self) -> str:
        if self.key is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}: {self.key}: {self.message}"


def verify_bundle(prefix: str | Path, *, workers: int | None = None) -> list[BundleProblem]:
    """Check a bundle against everything its index claims; return every problem found (empty if sound).

    Checks the index (every block CRC, key order, header version), that each data shard the header
    names exists and no stray one does, that every entry's byte range lies inside its shard, that POD
    sizes equal elements times item size, that partitioned tensors' slices are all present and tile the
    full shape, and every tensor's CRC32C (string and variant tensors by TensorFlow's own rules).
    Shards are read in fixed-size chunks by `workers` threads, so memory stays flat. Never raises
    for damaged data: an unreadable index is reported as a problem too.
    """
    try:
        bundle = open_bundle(prefix)
    except ReaderError as exc:
        index_path = f"{prefix}.index"
        return [BundleProblem(index_path, None, "unreadable-index", _without_path(str(exc), index_path))]
    return bundle.verify(workers=workers)


def _without_path(message: str, path: str) -> str:
    return message[len(path) + 2 :] if message.startswith(f"{path}: ") else message


@dataclass(frozen=True)
class _ChecksumJob:
    entry: BundleEntry
    label: str
    """The key, or `key[start:stop,...]` for a slice of a partitioned tensor."""


class _Verifier:
    def __init__(self, bundle: Bundle, workers: int | None) -> None:
        self.bundle = bundle
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.index = str(bundle.index_path)
        self._buffers = threading.local()

    def run(self) -> list[BundleProblem]:
        problems = self._check_header() + self._check_shard_files()
        jobs: list[_ChecksumJob] = []
        for entry in self.bundle.entries.values():
            if entry.is_sliced:
                problems += self._check_slices(entry, jobs)
            else:
                problems += self._check_placement(entry, entry.key, jobs)
        problems += self._check_checksums(jobs)
        return problems + self._check_object_graph(problems)

    def _check_object_graph(self, problems: list[BundleProblem]) -> list[BundleProblem]:
        """A graph tensor whose bytes are intact yet do not decode; damaged bytes are reported already."""
        error = self.bundle.object_graph_error
        if error is None or any(problem.key == OBJECT_GRAPH_KEY for problem in problems):
            return []
        graph_entry = self.bundle.entries[OBJECT_GRAPH_KEY]
        if self.bundle.shard_size(graph_entry.shard_id) is None:
            return []
        shard = self.bundle.shard_path(graph_entry.shard_id)
        message = _without_path(error, f"{shard}: {OBJECT_GRAPH_KEY}")
        return [self._problem(shard, OBJECT_GRAPH_KEY, "unreadable-object-graph", message)]

    def _problem(self, file: Path | str, key: str | None, code: str, message: str) -> BundleProblem:
        return BundleProblem(str(file), key, code, message)

    def _check_header(self) -> list[BundleProblem]:
        header = self.bundle.header
        problems = []
        if header.num_shards < 1:
            problems.append(
                self._problem(self.index, None, "bad-header", f"header declares {header.num_shards} data shards")
            )
        if header.min_consumer > SUPPORTED_BUNDLE_VERSION or SUPPORTED_BUNDLE_VERSION in header.bad_consumers:
            problems.append(
                self._problem(
                    self.index,
                    None,
                    "unsupported-version",
                    f"bundle version {header.producer} needs a reader of version {header.min_consumer} or later "
                    f"(this reader is version {SUPPORTED_BUNDLE_VERSION})",
                )
            )
        return problems

    def _check_shard_files(self) -> list[BundleProblem]:
        bundle = self.bundle
        declared = bundle.header.num_shards
        keys_by_shard: dict[int, list[str]] = {}
        for entry in bundle.entries.values():
            if not entry.is_sliced:
                keys_by_shard.setdefault(entry.shard_id, []).append(entry.key)
        for piece in bundle.slice_entries.values():
            keys_by_shard.setdefault(piece.shard_id, []).append(piece.key)
        problems = []
        for shard_id in range(max(declared, 0)):
            if bundle.shard_size(shard_id) is None:
                keys = keys_by_shard.get(shard_id, [])
                problems.append(
                    self._problem(
                        bundle.shard_path(shard_id),
                        keys[0] if keys else None,
                        "missing-shard",
                        f"data shard {shard_id} of {declared} is missing; it holds {len(keys)} tensors"
                        + (f" ({_first_names(keys)})" if keys else ""),
                    )
                )
        strays = self._stray_data_files(declared)
        for stray, (_shard_id, of) in strays.items():
            problems.append(
                self._problem(
                    stray,
                    None,
                    "unexpected-shard",
                    f"data file is not one of the {declared} shards the header of {self.index} declares"
                    + (f" (it is numbered as one of {of})" if of != declared else ""),
                )
            )
        counts_on_disk = {of for _shard_id, of in strays.values()} - {declared}
        if counts_on_disk:
            problems.append(
                self._problem(
                    self.index,
                    None,
                    "shard-count-mismatch",
                    f"header declares num_shards={declared}, but the data files on disk are numbered "
                    f"-of-{', -of-'.join(f'{count:05d}' for count in sorted(counts_on_disk))}",
                )
            )
        return problems

    def _stray_data_files(self, declared: int) -> dict[Path, tuple[int, int]]:
        prefix = self.bundle.prefix
        strays = {}
        try:
            siblings = list(prefix.parent.iterdir())
        except OSError:
            return {}
        for path in siblings:
            if not path.name.startswith(f"{prefix.name}.data-"):
                continue
            match = _DATA_FILE.search(path.name)
            if match is None or path.name[: match.start()] != prefix.name:
                continue
            shard_id, of = int(match.group(1)), int(match.group(2))
            if of != declared or shard_id >= declared:
                strays[path] = (shard_id, of)
        return dict(sorted(strays.items()))

    def _check_placement(self, entry: BundleEntry, label: str, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        bundle = self.bundle
        if not 0 <= entry.shard_id < bundle.header.num_shards:
            return [
                self._problem(
                    self.index,
                    label,
                    "bad-shard-id",
                    f"stored in shard {entry.shard_id}, but the header declares {bundle.header.num_shards} shards",
                )
            ]
        shard = bundle.shard_path(entry.shard_id)
        shard_size = bundle.shard_size(entry.shard_id)
        if entry.dtype.name.startswith("invalid") or entry.dtype.name == "resource":
            return [
                self._problem(self.index, label, "bad-dtype", f"dtype {entry.dtype.name} cannot be stored in a bundle")
            ]
        if entry.dtype.itemsize is not None and entry.size != entry.numel * entry.dtype.itemsize:
            return [
                self._problem(
                    self.index,
                    label,
                    "size-mismatch",
                    f"stored size {entry.size} bytes, but a {entry.dtype.name} tensor of shape "
                    f"{list(entry.shape)} takes {entry.numel * entry.dtype.itemsize}",
                )
            ]
        if entry.dtype.name == "string" and entry.size < entry.numel + 4:
            return [
                self._problem(
                    self.index,
                    label,
                    "size-mismatch",
                    f"stored size {entry.size} bytes is too small for {entry.numel} strings",
                )
            ]
        if shard_size is None:
            return []
        if entry.offset < 0 or entry.offset + entry.size > shard_size:
            return [
                self._problem(
                    shard,
                    label,
                    "out-of-range",
                    f"bytes {entry.offset}..{entry.offset + entry.size} lie outside the data file ({shard_size} bytes)",
                )
            ]
        jobs.append(_ChecksumJob(entry, label))
        return []

    def _check_slices(self, entry: BundleEntry, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        problems = []
        boxes: list[list[tuple[int, int]]] = []
        for tensor_slice in entry.slices:
            label = f"{entry.key}[{tensor_slice.spec(entry.shape)}]"
            piece, problem = self._find_slice(entry, tensor_slice, label)
            if problem is not None:
                problems.append(problem)
            if problem is None or problem.code != "bad-slice":
                boxes.append(tensor_slice.bounds(entry.shape))
            if piece is not None:
                problems += self._check_placement(piece, label, jobs)
        return problems + self._check_coverage(entry, boxes)

    def _find_slice(
        self, entry: BundleEntry, tensor_slice: TensorSlice, label: str
    ) -> tuple[BundleEntry | None, BundleProblem | None]:
        bounds = tensor_slice.bounds(entry.shape)
        fits = len(tensor_slice.extents) == len(entry.shape) and all(
            0 <= start <= stop <= size for (start, stop), size in zip(bounds, entry.shape)
        )
        if not fits:
            message = f"slice does not fit the full shape {list(entry.shape)}"
            return None, self._problem(self.index, label, "bad-slice", message)
        piece = self.bundle.slice_entries.get(encode_slice_key(entry.key, tensor_slice))
        if piece is None:
            return None, self._problem(self.index, label, "missing-slice", "the index has no entry for this slice")
        expected_shape = tuple(stop - start for start, stop in bounds)
        if piece.dtype != entry.dtype or piece.shape != expected_shape:
            found = f"{piece.dtype.name}{list(piece.shape)}"
            message = f"slice entry is {found}, expected {entry.dtype.name}{list(expected_shape)}"
            return None, self._problem(self.index, label, "slice-mismatch", message)
        return piece, None

    def _check_coverage(self, entry: BundleEntry, boxes: list[list[tuple[int, int]]]) -> list[BundleProblem]:
        for first, second in itertools.combinations(boxes, 2):
            if all(max(a0, b0) < min(a1, b1) for (a0, a1), (b0, b1) in zip(first, second)):
                message = f"slices [{_box_spec(first)}] and [{_box_spec(second)}] overlap"
                return [self._problem(self.index, entry.key, "slice-overlap", message)]
        covered = sum(prod(stop - start for start, stop in box) for box in boxes)
        if covered != entry.numel:
            return [
                self._problem(
                    self.index,
                    entry.key,
                    "slice-coverage",
                    f"slices cover {covered} of the {entry.numel} elements of shape {list(entry.shape)}",
                )
            ]
        return []

    def _check_checksums(self, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        if not jobs:
            return []
        descriptors: dict[int, int] = {}
        try:
            for shard_id in {job.entry.shard_id for job in jobs}:
                descriptors[shard_id] = os.open(self.bundle.shard_path(shard_id), os.O_RDONLY)
            # Largest first, so one big tensor does not start last and leave the other threads idle.
            ordered = sorted(jobs, key=lambda job: job.entry.size, reverse=True)
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                results = list(
                    pool.map(lambda job: self._check_checksum(job, descriptors[job.entry.shard_id]), ordered)
                )
        except OSError as exc:
            return [self._problem(exc.filename or self.index, None, "unreadable-shard", f"cannot read: {exc.strerror}")]
        finally:
            for descriptor in descriptors.values():
                os.close(descriptor)
        return sorted((problem for problem in results if problem is not None), key=lambda problem: problem.key or "")

    def _check_checksum(self, job: _ChecksumJob, descriptor: int) -> BundleProblem | None:
        entry = job.entry
        shard = self.bundle.shard_path(entry.shard_id)
        try:
            if entry.dtype.name == "string":
                crc = self._string_crc(entry, descriptor)
            elif entry.dtype.name == "variant":
                crc = self._variant_crc(entry, descriptor)
            else:
                crc = self._range_crc(descriptor, entry.offset, entry.size)
        except _ContentError as exc:
            return self._problem(shard, job.label, exc.code, str(exc))
        except OSError as exc:
            return self._problem(shard, job.label, "unreadable-shard", f"cannot read: {exc.strerror}")
        if mask_crc(crc) != entry.crc32c:
            return self._problem(
                shard,
                job.label,
                "checksum-mismatch",
                f"checksum mismatch: stored crc32c {unmask_crc(entry.crc32c):08x}, computed {crc:08x} over bytes "
                f"{entry.offset}..{entry.offset + entry.size}",
            )
        return None

    def _buffer(self) -> memoryview:
        buffer: memoryview | None = getattr(self._buffers, "view", None)
        if buffer is None:
            buffer = memoryview(bytearray(_CHUNK_BYTES))
            self._buffers.view = buffer
        return buffer

    def _range_crc(self, descriptor: int, offset: int, size: int, crc: int = 0) -> int:
        buffer = self._buffer()
        done = 0
        while done < size:
            wanted = min(len(buffer), size - done)
            got = os.preadv(descriptor, [buffer[:wanted]], offset + done)
            if got == 0:
                raise _ContentError("out-of-range", f"data file ends at byte {offset + done}, inside the tensor")
            crc = crc32c.crc32c(buffer[:got], crc)
            done += got
        return crc

    def _read_exactly(self, descriptor: int, offset: int, size: int) -> bytes:
        data = os.pread(descriptor, size, offset)
        if len(data) != size:
            raise _ContentError("out-of-range", f"data file ends at byte {offset + len(data)}, inside the tensor")
        return data

    def _string_crc(self, entry: BundleEntry, descriptor: int) -> int:
        # TensorFlow's WriteStringTensor: varint lengths, then a masked checksum of the lengths (each as
        # a uint32, or uint64 if it does not fit, in the writer's byte order), then the bytes. The
        # tensor checksum runs over the lengths as integers, the length checksum and the bytes.
        head = self._read_exactly(descriptor, entry.offset, min(entry.size, 10 * entry.numel + 4))
        try:
            lengths, position = _string_lengths(head, entry.numel, "")
        except CorruptCheckpointError:
            raise _ContentError("bad-string-lengths", "string lengths do not decode") from None
        order = self.bundle.header.byte_order
        crc = 0
        for length in lengths:
            crc = crc32c.crc32c(struct.pack(f"{order}I" if length <= 0xFFFFFFFF else f"{order}Q", length), crc)
        stored_length_crc = head[position : position + 4]
        if len(stored_length_crc) < 4 or position + 4 + sum(lengths) != entry.size:
            raise _ContentError(
                "size-mismatch",
                f"string lengths add up to {position + 4 + sum(lengths)} bytes, but the stored size is {entry.size}",
            )
        if unmask_crc(int.from_bytes(stored_length_crc, "little")) != crc:
            raise _ContentError("checksum-mismatch", "checksum mismatch in the string lengths")
        crc = crc32c.crc32c(stored_length_crc, crc)
        return self._range_crc(descriptor, entry.offset + position + 4, entry.size - position - 4, crc)

    def _variant_crc(self, entry: BundleEntry, descriptor: int) -> int:
        # TensorFlow's WriteVariantTensor: per element a varint length, the serialized
        # VariantTensorDataProto and the masked running checksum, which itself extends the checksum.
        data = self._read_exactly(descriptor, entry.offset, entry.size)
        order = self.bundle.header.byte_order
        crc = 0
        position = 0
        for element in range(entry.numel):
            try:
                length, position = read_varint(data, position)
            except ProtobufDecodeError:
                raise _ContentError("bad-variant", f"variant element {element} has a bad length") from None
            end = position + length
            if end + 4 > len(data):
                raise _ContentError(
                    "size-mismatch", f"variant element {element} runs past the stored size {entry.size}"
                )
            crc = crc32c.crc32c(data[position:end], crc32c.crc32c(struct.pack(f"{order}Q", length), crc))
            element_crc = data[end : end + 4]
            if unmask_crc(int.from_bytes(element_crc, "little")) != crc:
                raise _ContentError("checksum-mismatch", f"checksum mismatch in variant element {element}")
            crc = crc32c.crc32c(element_crc, crc)
            position = end + 4
        if position != entry.size:
            raise _ContentError(
                "size-mismatch", f"variant elements take {position} bytes, but the stored size is {entry.size}"
            )
        return crc


class _ContentError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _box_spec(box: list[tuple[int, int]]) -> str:
    return ",".join(f"{start}:{stop}" for start, stop in box)


def _first_names(keys: Sequence[str], shown: int = 3) -> str:
    names = ", ".join(repr(key) for key in keys[:shown])
    return names + (", ..." if len(keys) > shown else "")


# --------------------------------------------------------------------------------------------------
# Inspection


def inspect_bundle(prefix: str | Path) -> Inspection:
    """Summarise a bundle for `ckptspec inspect`: files, tensors with their components, and metadata."""
    bundle = open_bundle(prefix)
    files = [FileSummary(str(bundle.index_path), bundle.index_path.stat().st_size)]
    for shard_id in range(bundle.header.num_shards):
        size = bundle.shard_size(shard_id)
        if size is not None:
            files.append(FileSummary(str(bundle.shard_path(shard_id)), size))
    entries = list(bundle.entries.values())
    tensors = [TensorSummary(e.pointer, e.dtype.name, e.shape, e.nbytes, e.component) for e in entries]
    components: dict[str, str] = {}
    for component in dict.fromkeys(_COMPONENT_OF_ROLE.values()):
        members = [e for e in entries if e.component == component]
        if members:
            components[component] = members[0].pointer if len(members) == 1 else ""
    return Inspection(
        path=str(bundle.prefix),
        format="tf-bundle",
        files=files,
        tensors=tensors,
        metadata=_metadata(bundle),
        components=components,
    )


def _metadata(bundle: Bundle) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "num_shards": bundle.header.num_shards,
        "endianness": bundle.header.endianness,
        "bundle_version": bundle.header.producer,
        "object_graph": bundle.object_graph is not None,
    }
    roles: tuple[Role, ...] = ("save_counter", "optimizer_iterations")
    for role in roles:
        value = _scalar_of_role(bundle, role)
        if value is not None:
            metadata[role] = value
    return metadata


def _scalar_of_role(bundle: Bundle, role: Role) -> int | None:
    matches = [
        e
        for e in bundle.entries.values()
        if e.role == role and e.shape == () and e.dtype.name.startswith(("int", "uint"))
    ]
    if len(matches) != 1:
        return None
    try:
        (value,) = bundle.decode(matches[0].key)
    except (ReaderError, struct.error):
        return None
    return int(value)
