"""Read and verify TensorFlow tensor bundles (`PREFIX.index` + `PREFIX.data-NNNNN-of-NNNNN`) without TensorFlow.

The index is an SSTable whose first key, `""`, holds a `BundleHeaderProto` and whose other keys map
tensor names to `BundleEntryProto`s. Data shards are raw concatenated tensor bytes. TF2 bundles add a
`_CHECKPOINTABLE_OBJECT_GRAPH` string tensor that says which object each key belongs to; from it every
key gets an object path and a role (model variable, optimizer slot, RNG state, ...).

This module is the public face: `open_bundle`, `Bundle`, `verify_bundle` and `inspect_bundle`. The
pieces live beside it: `_tf_dtypes` (data types, string and variant layouts), `_tf_index` (header,
entry and slice records), `_tf_objects` (object graph, key placement and roles), `_tf_verify` and
`_tf_checksums` (a tensor's CRC32C computed as its writer computed it).

The byte-level facts are in docs/formats/tensorflow.md.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import field, replace
from functools import cached_property
from math import prod
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._storage import RemotePath, location
from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._inspection import FileSummary, Inspection, TensorSummary
from ._io import regular_file_size, unreadable
from ._source import read_range
from ._protobuf import ProtobufDecodeError
from ._tf_dtypes import DATA_TYPES, DataType, split_strings, split_variants
from ._tf_index import (
    BundleEntry,
    BundleHeader,
    SliceExtent,
    TensorSlice,
    decode_entry,
    decode_header,
    encode_slice_key,
)
from ._tf_objects import COMPONENT_OF_ROLE, OBJECT_GRAPH_KEY, ObjectGraph, Role, TrackableObject, key_placement
from ._tf_verify import BundleProblem, Verifier, unreadable_index
from ._names import TF_DATA_SHARD, prefix_file, prefix_parts
from .sstable import SSTable

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


_CHUNK_BYTES = 4 << 20
_SHARD_SIZE_LIMIT = 1 << 50
"""Data shards are streamed, never read whole: any size a disk holds is fine."""


def data_file_name(prefix: Path, shard_id: int, num_shards: int) -> Path:
    return prefix_file(prefix, _data_suffix(shard_id, num_shards))


def _data_suffix(shard_id: int, num_shards: int) -> str:
    return f".data-{shard_id:05d}-of-{num_shards:05d}"


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
        return self._file(".index")

    def shard_path(self, shard_id: int) -> Path:
        return self._file(_data_suffix(shard_id, self.header.num_shards))

    @cached_property
    def _parts(self) -> tuple[Path, str]:
        return prefix_parts(self.prefix)

    def _file(self, suffix: str) -> Path:
        directory, name = self._parts
        return directory / f"{name}{suffix}"

    def shard_size(self, shard_id: int) -> int | None:
        """Size of a data shard, or None if it is missing."""
        if shard_id not in self._shard_sizes:
            try:
                self._shard_sizes[shard_id] = self.shard_path(shard_id).stat().st_size
            except OSError:
                self._shard_sizes[shard_id] = None
        return self._shard_sizes[shard_id]

    def present_shards(self) -> list[int]:
        """The ids of the declared data shards that are on disk, found by listing the directory: never a
        loop over the count the header claims."""
        directory, name = self._parts
        try:
            names = [child.name for child in directory.iterdir()]
        except (OSError, ReaderError):
            return []
        declared = self.header.num_shards
        ids = []
        for file_name in names:
            match = TF_DATA_SHARD.search(file_name)
            if match is not None and file_name[: match.start()] == name and int(match.group(2)) == declared:
                shard_id = int(match.group(1))
                if shard_id < declared:
                    ids.append(shard_id)
        return sorted(ids)

    def iter_bytes(self, key: str) -> Iterator[bytes]:
        """The stored bytes of a tensor in row-major order, in chunks of at most `_CHUNK_BYTES`.

        A tensor partitioned along one axis (as TensorFlow's partitioners do) is streamed slice by
        slice, never assembled; any other partitioned layout is assembled, within the bytes its data
        files hold.
        """
        entry = self._entry(key)
        if not entry.is_sliced:
            yield from self._chunks(entry, 0, entry.size)
            return
        runs = self._runs(entry)
        if runs is None:
            yield self._assemble(entry)
            return
        for piece, start, length in runs:
            yield from self._chunks(piece, start, length)

    def stored_runs(self, key: str, limit: int) -> list[tuple[int, int, int]] | None:
        """(shard id, offset in the shard, length) of each contiguous run of a partitioned tensor's
        bytes, in the row-major order `iter_bytes` streams them; None when it has more than `limit`
        runs, or is assembled instead (see `iter_bytes`)."""
        entry = self._entry(key)
        runs = self._runs(entry) if entry.is_sliced else None
        if runs is None:
            return None
        found = [(piece.shard_id, piece.offset + start, length) for piece, start, length in itertools.islice(runs, limit + 1)]
        return found if len(found) <= limit else None

    def _runs(self, entry: BundleEntry) -> Iterator[tuple[BundleEntry, int, int]] | None:
        """(slice entry, offset in it, length) of each contiguous run of a tensor partitioned along
        one axis, in row-major order; None for any other layout."""
        itemsize = entry.dtype.itemsize
        shape = entry.shape
        boxes = [(tensor_slice.bounds(shape), tensor_slice) for tensor_slice in entry.slices]
        axes = {axis for bounds, _ in boxes for axis, extent in enumerate(bounds) if extent != (0, shape[axis])}
        if itemsize is None or len(axes) > 1 or any(len(bounds) != len(shape) for bounds, _ in boxes):
            return None
        axis = next(iter(axes), 0)
        outer = prod(shape[:axis])
        inner = prod(shape[axis + 1 :]) * itemsize
        pieces = []
        reached = 0
        for bounds, tensor_slice in sorted(boxes, key=lambda box: box[0][axis] if box[0] else (0, 0)):
            piece = self.slice_entries.get(encode_slice_key(entry.key, tensor_slice))
            start, stop = bounds[axis] if bounds else (0, 1)
            if piece is None or start != reached or piece.size != outer * (stop - start) * inner:
                return None
            pieces.append((piece, stop - start))
            reached = stop
        if shape and reached != shape[axis]:
            return None

        def runs() -> Iterator[tuple[BundleEntry, int, int]]:
            for index in range(outer if inner else 0):
                for piece, length in pieces:
                    yield piece, index * length * inner, length * inner

        return runs()

    def _chunks(self, entry: BundleEntry, start: int, length: int) -> Iterator[bytes]:
        for offset in range(start, start + length, _CHUNK_BYTES):
            part = replace(entry, offset=entry.offset + offset, size=min(_CHUNK_BYTES, start + length - offset))
            yield self._read_range(part)

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
            return split_strings(data, entry.numel, f"{self.shard_path(entry.shard_id)}: {key}")
        if entry.dtype.name == "variant":
            return split_variants(data, entry.numel, f"{self.shard_path(entry.shard_id)}: {key}")
        if entry.dtype.struct_format is None:
            raise ReaderError(f"{self.index_path}: {key}: cannot decode dtype {entry.dtype.name}")
        count = entry.numel * (2 if entry.dtype.name.startswith("complex") else 1)
        values = list(struct.unpack(f"{self.header.byte_order}{count}{entry.dtype.struct_format}", data))
        if entry.dtype.name == "bfloat16":
            return [struct.unpack("<f", struct.pack("<I", bits << 16))[0] for bits in values]
        if entry.dtype.name.startswith("complex"):
            return [complex(real, imag) for real, imag in zip(values[::2], values[1::2])]
        return values

    def verify(self, *, workers: int | None = None, checksums: bool = True) -> list[BundleProblem]:
        """Every problem with the bundle's data: see `verify_bundle`. Without `checksums`, only the
        layout is checked (shards present, byte ranges inside them, object graph decodes): no tensor
        bytes are read but the object graph's."""
        verifier = Verifier(self, workers)
        return verifier.run() if checksums else verifier.run_without_checksums()

    def _entry(self, key: str) -> BundleEntry:
        try:
            return self.entries[key]
        except KeyError:
            raise ReaderError(f"{self.index_path}: no tensor named {key!r}") from None

    def _read_range(self, entry: BundleEntry) -> bytes:
        path = self.shard_path(entry.shard_id)
        size = self.shard_size(entry.shard_id)
        # Checked before reading: the read's buffer is as large as the size the index claims.
        if size is not None and (entry.offset < 0 or entry.size < 0 or entry.offset + entry.size > size):
            raise CorruptCheckpointError(
                f"{path}: {entry.key}: bytes {entry.offset}..{entry.offset + entry.size} lie past the end of the file"
            )
        data = read_range(path, entry.offset, entry.size, item=entry.key)
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
        present = sum(self.shard_size(shard_id) or 0 for shard_id in self.present_shards())
        if entry.numel * itemsize > present:
            raise CorruptCheckpointError(
                f"{self.index_path}: {entry.key}: claims {entry.numel * itemsize} bytes, more than its data files hold"
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


def open_bundle(prefix: str | Path) -> Bundle:
    """Read a bundle's index (verifying every index block) and its object graph.

    Raises `ReaderError` when the index is missing and `CorruptCheckpointError` when it cannot be
    decoded; damage to data shards is left for `Bundle.verify`.
    """
    prefix = location(prefix)
    index_path = prefix_file(prefix, ".index")
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
                header = decode_header(value)
            elif raw_key.startswith(b"\x00"):
                slice_entries[raw_key] = decode_entry(key, value)
            else:
                entries[key] = decode_entry(key, value)
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
    place = key_placement(bundle.object_graph)
    for key, entry in bundle.entries.items():
        object_path, role = place(key)
        bundle.entries[key] = replace(entry, object_path=object_path, role=role)


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
        return [unreadable_index(prefix, exc)]
    return bundle.verify(workers=workers)


def inspect_bundle(prefix: str | Path) -> Inspection:
    """Summarise a bundle for `ckptspec inspect`: files, tensors with their components, and metadata.

    Tensor checksums are not verified, but a bundle whose layout is damaged (a missing or truncated
    shard, an object graph that does not decode, ...) is refused rather than summarised: its
    components would be wrong. Raises `ReaderError` for an unreadable shard and
    `CorruptCheckpointError` naming the first problem otherwise.
    """
    bundle = open_bundle(prefix)
    _require_readable_shards(bundle)
    _refuse_damaged_layout(bundle)
    files = [FileSummary(str(bundle.index_path), bundle.index_path.stat().st_size)]
    for shard_id in bundle.present_shards():
        size = bundle.shard_size(shard_id)
        if size is not None:
            files.append(FileSummary(str(bundle.shard_path(shard_id)), size))
    entries = list(bundle.entries.values())
    tensors = [TensorSummary(e.pointer, e.dtype.name, e.shape, e.nbytes, e.component) for e in entries]
    components: dict[str, str] = {}
    for component in dict.fromkeys(COMPONENT_OF_ROLE.values()):
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


def _require_readable_shards(bundle: Bundle) -> None:
    for shard_id in bundle.present_shards():
        path = bundle.shard_path(shard_id)
        try:
            regular_file_size(path, _SHARD_SIZE_LIMIT)
            if not isinstance(path, RemotePath):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except FileNotFoundError:
            continue  # reported as a missing shard by the layout check
        except OSError as exc:
            raise unreadable(path, exc) from None


def _refuse_damaged_layout(bundle: Bundle) -> None:
    problems = bundle.verify(checksums=False)
    if not problems:
        return
    first, others = problems[0], len(problems) - 1
    more = f"; {others} more problem{'s' if others > 1 else ''}: `ckptspec validate` lists them all" if others else ""
    error = UnsupportedFormatError if first.code == "unsupported-version" else CorruptCheckpointError
    raise error(f"{first}{more}")


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
