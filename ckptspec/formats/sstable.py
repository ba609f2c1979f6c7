"""Read the LevelDB-style sorted string table that a TensorFlow bundle uses as its `.index` file.

Layout: data blocks, a metaindex block and an index block, each followed by a 5-byte trailer
(compression type + masked CRC32C of contents and type), then a 48-byte footer holding the
metaindex and index block handles and the table magic. Every block's checksum is verified.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from .._dataclass import dataclass
from .. import _crc32c as crc32c

from .._storage import location
from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from ._io import read_bytes
from ._protobuf import ProtobufDecodeError, read_varint

__all__ = [
    "TABLE_MAGIC",
    "BlockHandle",
    "SSTable",
    "mask_crc",
    "unmask_crc",
]

TABLE_MAGIC = bytes.fromhex("57fb808b247547db")
FOOTER_LENGTH = 48
BLOCK_TRAILER_LENGTH = 5
NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1
INDEX_SIZE_LIMIT = 1 << 30
"""Index files are read whole; a bundle's index holds one small record per tensor, never this much."""
_KEY_BYTES_PER_TABLE_BYTE = 16
"""Prefix-compressed keys may share bytes, but never this many per byte of the table: a table whose
keys grow one shared byte at a time (each copy longer than the last) is refused, not built."""
_SNAPPY_MAX_RATIO = 32
"""Snappy's longest copy (64 bytes from a 3-byte tag) expands 21-fold; a block claiming more is refused
before it is inflated."""
_CRC_MASK_DELTA = 0xA282EAD8
_UINT32 = 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB's CRC mask: stored checksums are rotated so a CRC of CRC-bearing data stays strong."""
    return ((((crc >> 15) | (crc << 17)) & _UINT32) + _CRC_MASK_DELTA) & _UINT32


def unmask_crc(masked: int) -> int:
    rotated = (masked - _CRC_MASK_DELTA) & _UINT32
    return ((rotated >> 17) | (rotated << 15)) & _UINT32


@dataclass(frozen=True)
class BlockHandle:
    offset: int
    size: int
    """Size of the block contents, without the 5-byte trailer."""


class SSTable:
    """An immutable string→string table, read whole into memory (index files are small)."""

    def __init__(self, path: str | Path, contents: bytes) -> None:
        self.path = location(path)
        self._contents = contents
        self.metaindex_handle, self.index_handle = self._read_footer()

    @classmethod
    def open(cls, path: str | Path) -> SSTable:
        return cls(path, read_bytes(path, INDEX_SIZE_LIMIT))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Yield every (key, value) in key order, verifying each block and that keys strictly increase."""
        self._read_block(self.metaindex_handle, "metaindex block")
        index = self._read_block(self.index_handle, "index block")
        previous_key: bytes | None = None
        key_budget = _KEY_BYTES_PER_TABLE_BYTE * len(self._contents)
        for separator, encoded_handle in self._block_entries(index, self.index_handle, "index block"):
            handle = self._decode_handle(encoded_handle, f"index entry {separator!r}")
            block = self._read_block(handle, "data block")
            for key, value in self._block_entries(block, handle, "data block"):
                if previous_key is not None and key <= previous_key:
                    raise CorruptCheckpointError(
                        f"{self.path}: {self._describe(handle, 'data block')}: key {key!r} does not sort "
                        f"after {previous_key!r}"
                    )
                previous_key = key
                key_budget -= len(key)
                if key_budget < 0:
                    raise CorruptCheckpointError(
                        f"{self.path}: {self._describe(handle, 'data block')}: its prefix-compressed keys expand to "
                        f"more than {_KEY_BYTES_PER_TABLE_BYTE} bytes per byte of the table"
                    )
                yield key, value
            if previous_key is not None and previous_key > separator:
                raise CorruptCheckpointError(
                    f"{self.path}: index block: separator {separator!r} sorts before the last key "
                    f"{previous_key!r} of the data block it points to"
                )

    def _read_footer(self) -> tuple[BlockHandle, BlockHandle]:
        if len(self._contents) < FOOTER_LENGTH:
            raise CorruptCheckpointError(
                f"{self.path}: file is too short to be an sstable ({len(self._contents)} bytes, "
                f"a footer alone is {FOOTER_LENGTH})"
            )
        footer = self._contents[-FOOTER_LENGTH:]
        if footer[-8:] != TABLE_MAGIC:
            raise CorruptCheckpointError(
                f"{self.path}: not an sstable (bad magic number {footer[-8:].hex()}, expected {TABLE_MAGIC.hex()})"
            )
        try:
            metaindex_offset, position = read_varint(footer, 0)
            metaindex_size, position = read_varint(footer, position)
            index_offset, position = read_varint(footer, position)
            index_size, _ = read_varint(footer, position)
        except ProtobufDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: footer: bad block handle: {exc}") from None
        return BlockHandle(metaindex_offset, metaindex_size), BlockHandle(index_offset, index_size)

    def _decode_handle(self, encoded: bytes, where: str) -> BlockHandle:
        try:
            offset, position = read_varint(encoded, 0)
            size, _ = read_varint(encoded, position)
        except ProtobufDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: {where}: bad block handle: {exc}") from None
        return BlockHandle(offset, size)

    def _describe(self, handle: BlockHandle, kind: str) -> str:
        return f"{kind} at offset {handle.offset} (size {handle.size})"

    def _read_block(self, handle: BlockHandle, kind: str) -> bytes:
        end = handle.offset + handle.size + BLOCK_TRAILER_LENGTH
        if end > len(self._contents) - FOOTER_LENGTH:
            raise CorruptCheckpointError(
                f"{self.path}: {self._describe(handle, kind)} runs past the end of the table "
                f"({len(self._contents)} bytes)"
            )
        contents = self._contents[handle.offset : handle.offset + handle.size]
        compression = self._contents[handle.offset + handle.size]
        (stored,) = struct.unpack_from("<I", self._contents, handle.offset + handle.size + 1)
        computed = crc32c.crc32c(bytes([compression]), crc32c.crc32c(contents))
        if unmask_crc(stored) != computed:
            raise CorruptCheckpointError(
                f"{self.path}: {self._describe(handle, kind)}: block checksum mismatch "
                f"(stored {unmask_crc(stored):08x}, computed {computed:08x})"
            )
        if compression == NO_COMPRESSION:
            return contents
        if compression == SNAPPY_COMPRESSION:
            return self._decompress_snappy(contents, handle, kind)
        raise CorruptCheckpointError(f"{self.path}: {self._describe(handle, kind)}: bad block type {compression}")

    def _decompress_snappy(self, contents: bytes, handle: BlockHandle, kind: str) -> bytes:
        try:
            claimed, _ = read_varint(contents, 0)
        except ProtobufDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: {self._describe(handle, kind)}: bad snappy header: {exc}") from None
        if claimed > _SNAPPY_MAX_RATIO * len(contents):
            raise CorruptCheckpointError(
                f"{self.path}: {self._describe(handle, kind)}: claims {claimed} bytes once decompressed, more than "
                f"snappy can expand {len(contents)} bytes to"
            )
        try:
            import cramjam
        except ImportError:
            cramjam = None
        if cramjam is not None:
            return bytes(cramjam.snappy.decompress_raw(contents))
        try:
            import snappy
        except ImportError:
            raise UnsupportedFormatError(
                f"{self.path}: {self._describe(handle, kind)}: unsupported compression: the block is "
                "snappy-compressed; install `cramjam` or `python-snappy` to read it"
            ) from None
        return bytes(snappy.uncompress(contents))

    def _block_entries(self, block: bytes, handle: BlockHandle, kind: str) -> Iterator[tuple[bytes, bytes]]:
        where = self._describe(handle, kind)
        restarts = self._restart_points(block, where)
        entries_end = len(block) - 4 * (len(restarts) + 1)
        key = b""
        position = 0
        starts: dict[int, int] = {}
        try:
            while position < entries_end:
                entry_start = position
                shared, position = read_varint(block, position)
                unshared, position = read_varint(block, position)
                value_length, position = read_varint(block, position)
                if shared > len(key) or position + unshared + value_length > entries_end:
                    raise CorruptCheckpointError(f"{self.path}: {where}: bad entry in block at byte {entry_start}")
                starts[entry_start] = shared
                key = key[:shared] + block[position : position + unshared]
                position += unshared
                yield key, block[position : position + value_length]
                position += value_length
        except ProtobufDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: {where}: bad entry in block: {exc}") from None
        misplaced = [offset for offset in restarts if starts.get(offset, 1) != 0 and offset != entries_end]
        if misplaced:
            raise CorruptCheckpointError(
                f"{self.path}: {where}: bad block contents: restart point {misplaced[0]} is not a full-key entry"
            )

    def _restart_points(self, block: bytes, where: str) -> list[int]:
        if len(block) < 4:
            raise CorruptCheckpointError(f"{self.path}: {where}: bad block contents (shorter than 4 bytes)")
        (count,) = struct.unpack_from("<I", block, len(block) - 4)
        if count == 0 or 4 * (count + 1) > len(block):
            raise CorruptCheckpointError(f"{self.path}: {where}: bad block contents ({count} restart points)")
        start = len(block) - 4 * (count + 1)
        return list(struct.unpack_from(f"<{count}I", block, start))
