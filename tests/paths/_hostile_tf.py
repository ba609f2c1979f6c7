"""TensorFlow index files that claim far more than their bytes hold, each a few hundred kB at most."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import crc32c

from ckptspec.formats._tf_dtypes import DATA_TYPES
from ckptspec.formats.sstable import TABLE_MAGIC, mask_crc
from ckptspec.formats.tfbundle import OBJECT_GRAPH_KEY, BundleEntry, SliceExtent, TensorSlice

from ..tf_reader.tf_bundle_edit import encode_entry, encode_header, message_field, string_tensor, varint, varint_field, write_table

FLOAT = DATA_TYPES[1]
STRING = DATA_TYPES[7]


def _bundle(prefix: Path, entries: list[BundleEntry], data: bytes = b"", num_shards: int = 1) -> Path:
    Path(f"{prefix}.data-00000-of-{num_shards:05d}").write_bytes(data)
    items = [(b"", encode_header(num_shards))] + sorted((e.key.encode(), encode_entry(e)) for e in entries)
    write_table(Path(f"{prefix}.index"), items)
    return prefix


def billion_shards(directory: Path) -> Path:
    return _bundle(directory / "ckpt", [BundleEntry("w", FLOAT, (1,), 0, 0, 4, 0)], b"\0" * 4, num_shards=10**9)


def trillion_elements(directory: Path) -> Path:
    return _bundle(directory / "ckpt", [BundleEntry("w", FLOAT, (10**6, 10**6), 0, 0, 4 * 10**12, 0)], b"\0" * 4)


def _graph_bundle(directory: Path, nodes: list[bytes]) -> Path:
    graph, graph_crc = string_tensor([b"".join(message_field(1, node) for node in nodes)])
    entries = [BundleEntry(OBJECT_GRAPH_KEY, STRING, (), 0, 0, len(graph), graph_crc)]
    entries += [BundleEntry("a/" * 40 + ".ATTRIBUTES/VARIABLE_VALUE", FLOAT, (), 0, len(graph), 0, 0)]
    return _bundle(directory / "ckpt", entries, graph)


def _child(node_id: int, name: bytes) -> bytes:
    return message_field(1, varint_field(1, node_id) + message_field(2, name))


def deep_object_graph(directory: Path, depth: int = 40_000) -> Path:
    """A chain of objects each the only child of the last: every path is as long as the chain above it."""
    return _graph_bundle(directory, [_child(node + 1, b"a") for node in range(depth)] + [b""])


def cyclic_object_graph(directory: Path, size: int = 20_000) -> Path:
    """Every object the child of every tenth other, around a cycle, and one hub child of all."""
    nodes = [_child((node + 1) % size, b"a") + _child(size, b"hub") for node in range(size)]
    hub = b"".join(_child(node, b"n%d" % node) for node in range(0, size, 3))
    return _graph_bundle(directory, nodes + [hub])


def many_slices(directory: Path, count: int = 20_000) -> Path:
    """A partitioned tensor of `count` one-row slices: pairwise comparison would take 2·10^8 steps."""
    slices = tuple(TensorSlice((SliceExtent(row, 1), SliceExtent(0, None))) for row in range(count))
    whole = BundleEntry("w", FLOAT, (count, 2), 0, 0, 0, 0, slices)
    return _bundle(directory / "ckpt", [whole])


def deep_shape(directory: Path) -> Path:
    return _bundle(directory / "ckpt", [BundleEntry("w", FLOAT, (2**62,) * 20_000, 0, 0, 4, 0)], b"\0" * 4)


def growing_keys(directory: Path, count: int = 300_000) -> Path:
    """Each key is the last plus one byte, sharing all of it: the table is small, its keys are not."""
    body = bytearray(varint(0) + varint(0) + varint(len(header := encode_header(1))) + header)
    key_length = 0
    for _ in range(count):
        body += varint(key_length) + varint(1) + varint(0) + b"a"
        key_length += 1
    block = bytes(body) + struct.pack("<II", 0, 1)
    return _raw_table(directory / "ckpt", block, compression=0)


def snappy_bomb(directory: Path) -> Path:
    """A data block that claims to decompress to 4 GiB."""
    return _raw_table(directory / "ckpt", varint(1 << 32) + b"\0" * 64, compression=1)


def _raw_table(prefix: Path, block: bytes, compression: int) -> Path:
    def trailer(contents: bytes, kind: int = 0) -> bytes:
        crc = crc32c.crc32c(bytes([kind]), crc32c.crc32c(contents))
        return contents + bytes([kind]) + struct.pack("<I", mask_crc(crc))

    data = trailer(block, compression)
    metaindex = trailer(struct.pack("<II", 0, 1))
    handle = varint(0) + varint(len(block))
    index_block = varint(0) + varint(1) + varint(len(handle)) + b"\xff" + handle
    index = trailer(index_block + struct.pack("<II", 0, 1))
    handles = varint(len(data)) + varint(len(metaindex) - 5) + varint(len(data) + len(metaindex)) + varint(len(index) - 5)
    Path(f"{prefix}.index").write_bytes(data + metaindex + index + handles.ljust(40, b"\0") + TABLE_MAGIC)
    Path(f"{prefix}.data-00000-of-00001").write_bytes(b"")
    return prefix


HOSTILE: dict[str, Callable[[Path], Path]] = {
    "billion_shards": billion_shards,
    "trillion_elements": trillion_elements,
    "deep_object_graph": deep_object_graph,
    "cyclic_object_graph": cyclic_object_graph,
    "many_slices": many_slices,
    "deep_shape": deep_shape,
    "growing_keys": growing_keys,
    "snappy_bomb": snappy_bomb,
}
