"""The CRC32C of a TensorFlow bundle tensor's stored bytes, computed as its writer computed it.

Plain tensors are checksummed over their bytes; string and variant tensors over the layout their
writer gives them (lengths, then bytes). Bytes are read from the data shard in fixed-size chunks
into one buffer per thread, so memory stays flat however large the shards.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import threading
from pathlib import Path

from .. import _crc32c as crc32c
from .._exceptions import CorruptCheckpointError
from .._storage import RemotePath
from ._protobuf import ProtobufDecodeError, read_varint
from ._source import ByteSource, open_source
from ._tf_dtypes import string_lengths
from ._tf_index import BundleEntry
from .sstable import unmask_crc

__all__ = ["ContentError", "Shard", "TensorChecksums", "close_shard", "open_shard"]

_CHUNK_BYTES = 256 << 10


class ContentError(Exception):
    """Bytes that do not hold what the index says of them; `code` names the problem."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


Shard = int | ByteSource
"""A local data shard's descriptor, or a remote one's ranged reader."""


def open_shard(path: Path | RemotePath) -> Shard:
    """A descriptor of the data shard at `path`; opening a FIFO put in its place must not wait for a writer."""
    if isinstance(path, RemotePath):
        return open_source(path, what="a data shard")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(errno.EINVAL, "not a regular file")
    return descriptor


def close_shard(shard: Shard) -> None:
    if isinstance(shard, ByteSource):
        shard.close()
    else:
        os.close(shard)


class TensorChecksums:
    """Computes the unmasked CRC32C of tensors stored in the shards of one bundle, whose header gives
    `byte_order`; safe to call from several threads at once."""

    def __init__(self, byte_order: str) -> None:
        self._byte_order = byte_order
        self._buffers = threading.local()

    def crc(self, entry: BundleEntry, descriptor: Shard) -> int:
        """The checksum of `entry`'s bytes in the shard `descriptor`; raises `ContentError` when they do
        not hold what the entry says, `OSError` when they cannot be read."""
        if entry.dtype.name == "string":
            return self._string_crc(entry, descriptor)
        if entry.dtype.name == "variant":
            return self._variant_crc(entry, descriptor)
        return self._range_crc(descriptor, entry.offset, entry.size)

    def _buffer(self) -> memoryview:
        buffer: memoryview | None = getattr(self._buffers, "view", None)
        if buffer is None:
            buffer = memoryview(bytearray(_CHUNK_BYTES))
            self._buffers.view = buffer
        return buffer

    def _range_crc(self, descriptor: Shard, offset: int, size: int, crc: int = 0) -> int:
        if isinstance(descriptor, ByteSource):
            _within(descriptor, offset, size)
            for chunk in descriptor.stream(offset, size, _CHUNK_BYTES):
                crc = crc32c.crc32c(chunk, crc)
            return crc
        buffer = self._buffer()
        done = 0
        while done < size:
            wanted = min(len(buffer), size - done)
            got = os.preadv(descriptor, [buffer[:wanted]], offset + done)
            if got == 0:
                raise ContentError("out-of-range", f"data file ends at byte {offset + done}, inside the tensor")
            crc = crc32c.crc32c(buffer[:got], crc)
            done += got
        return crc

    def _read_exactly(self, descriptor: Shard, offset: int, size: int) -> bytes:
        if isinstance(descriptor, ByteSource):
            _within(descriptor, offset, size)
        data = descriptor.pread(offset, size) if isinstance(descriptor, ByteSource) else os.pread(descriptor, size, offset)
        if len(data) != size:
            raise ContentError("out-of-range", f"data file ends at byte {offset + len(data)}, inside the tensor")
        return data

    def _string_crc(self, entry: BundleEntry, descriptor: Shard) -> int:
        # TensorFlow's WriteStringTensor: varint lengths, then a masked checksum of the lengths (each as
        # a uint32, or uint64 if it does not fit, in the writer's byte order), then the bytes. The
        # tensor checksum runs over the lengths as integers, the length checksum and the bytes.
        head = self._read_exactly(descriptor, entry.offset, min(entry.size, 10 * entry.numel + 4))
        try:
            lengths, position = string_lengths(head, entry.numel, "")
        except CorruptCheckpointError:
            raise ContentError("bad-string-lengths", "string lengths do not decode") from None
        order = self._byte_order
        crc = 0
        for length in lengths:
            crc = crc32c.crc32c(struct.pack(f"{order}I" if length <= 0xFFFFFFFF else f"{order}Q", length), crc)
        stored_length_crc = head[position : position + 4]
        if len(stored_length_crc) < 4 or position + 4 + sum(lengths) != entry.size:
            raise ContentError(
                "size-mismatch",
                f"string lengths add up to {position + 4 + sum(lengths)} bytes, but the stored size is {entry.size}",
            )
        if unmask_crc(int.from_bytes(stored_length_crc, "little")) != crc:
            raise ContentError("checksum-mismatch", "checksum mismatch in the string lengths")
        crc = crc32c.crc32c(stored_length_crc, crc)
        return self._range_crc(descriptor, entry.offset + position + 4, entry.size - position - 4, crc)

    def _variant_crc(self, entry: BundleEntry, descriptor: Shard) -> int:
        # TensorFlow's WriteVariantTensor: per element a varint length, the serialized
        # VariantTensorDataProto and the masked running checksum, which itself extends the checksum.
        data = self._read_exactly(descriptor, entry.offset, entry.size)
        order = self._byte_order
        crc = 0
        position = 0
        for element in range(entry.numel):
            try:
                length, position = read_varint(data, position)
            except ProtobufDecodeError:
                raise ContentError("bad-variant", f"variant element {element} has a bad length") from None
            end = position + length
            if end + 4 > len(data):
                raise ContentError(
                    "size-mismatch", f"variant element {element} runs past the stored size {entry.size}"
                )
            crc = crc32c.crc32c(data[position:end], crc32c.crc32c(struct.pack(f"{order}Q", length), crc))
            element_crc = data[end : end + 4]
            if unmask_crc(int.from_bytes(element_crc, "little")) != crc:
                raise ContentError("checksum-mismatch", f"checksum mismatch in variant element {element}")
            crc = crc32c.crc32c(element_crc, crc)
            position = end + 4
        if position != entry.size:
            raise ContentError(
                "size-mismatch", f"variant elements take {position} bytes, but the stored size is {entry.size}"
            )
        return crc


def _within(source: ByteSource, offset: int, size: int) -> None:
    if offset + size > source.size:
        raise ContentError("out-of-range", f"data file ends at byte {source.size}, inside the tensor")
