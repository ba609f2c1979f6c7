"""Write SSTables and bundle protos, so tests can forge index files that lie in exactly one way."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import crc32c

from ckptspec.formats.sstable import TABLE_MAGIC, SSTable, mask_crc
from ckptspec.formats.tfbundle import BundleEntry, TensorSlice

Items = list[tuple[bytes, bytes]]


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def message_field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def encode_header(num_shards: int, *, endianness: int = 0, producer: int = 1, min_consumer: int = 0) -> bytes:
    version = varint_field(1, producer) + (varint_field(2, min_consumer) if min_consumer else b"")
    return (
        varint_field(1, num_shards) + (varint_field(2, endianness) if endianness else b"") + message_field(3, version)
    )


def encode_slice(tensor_slice: TensorSlice) -> bytes:
    extents = b""
    for extent in tensor_slice.extents:
        body = varint_field(1, extent.start) + (varint_field(2, extent.length) if extent.length is not None else b"")
        extents += message_field(1, body)
    return extents


def encode_entry(entry: BundleEntry) -> bytes:
    shape = b"".join(message_field(2, varint_field(1, size)) for size in entry.shape)
    encoded = varint_field(1, entry.dtype.enum) + message_field(2, shape)
    encoded += varint_field(3, entry.shard_id) + varint_field(4, entry.offset) + varint_field(5, entry.size)
    encoded += varint(6 << 3 | 5) + struct.pack("<I", entry.crc32c)
    return encoded + b"".join(message_field(7, encode_slice(s)) for s in entry.slices)


def _block(items: Items, restart_interval: int) -> bytes:
    body = bytearray()
    restarts = []
    previous = b""
    for number, (key, value) in enumerate(items):
        shared = 0
        if number % restart_interval == 0:
            restarts.append(len(body))
        else:
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        body += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    restarts = restarts or [0]
    return bytes(body) + struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack("<I", len(restarts))


def _with_trailer(contents: bytes, compression: int = 0) -> bytes:
    crc = crc32c.crc32c(bytes([compression]), crc32c.crc32c(contents))
    return contents + bytes([compression]) + struct.pack("<I", mask_crc(crc))


def write_table(path: Path, items: Items, *, restart_interval: int = 16, data_compression: int = 0) -> None:
    """One data block, an empty metaindex block, an index block and the footer, as TensorFlow lays them out."""
    data = _with_trailer(_block(items, restart_interval), data_compression)
    metaindex_offset = len(data)
    metaindex = _with_trailer(_block([], 1))
    index_offset = metaindex_offset + len(metaindex)
    last_key = items[-1][0] if items else b""
    index = _with_trailer(_block([(last_key, varint(0) + varint(len(data) - 5))], 1))
    handles = varint(metaindex_offset) + varint(len(metaindex) - 5) + varint(index_offset) + varint(len(index) - 5)
    path.write_bytes(data + metaindex + index + handles.ljust(40, b"\0") + TABLE_MAGIC)


def rewrite_index(prefix: Path, edit: Callable[[Items], Items]) -> None:
    index = Path(f"{prefix}.index")
    write_table(index, edit(list(SSTable.open(index).items())))


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        (byte,) = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte ^ 0xFF]))


def string_tensor(values: list[bytes]) -> tuple[bytes, int]:
    """A DT_STRING tensor's stored bytes and masked checksum, built the way TensorFlow's writer builds them."""
    lengths = b"".join(varint(len(value)) for value in values)
    crc = 0
    for value in values:
        crc = crc32c.crc32c(struct.pack("<I", len(value)), crc)
    length_checksum = struct.pack("<I", mask_crc(crc))
    crc = crc32c.crc32c(b"".join(values), crc32c.crc32c(length_checksum, crc))
    return lengths + length_checksum + b"".join(values), mask_crc(crc)
