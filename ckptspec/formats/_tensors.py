"""The tensor records every reader gives: where a storage's bytes lie (`StorageRef`), a tensor as
stored over one (`TensorRef`), dtype sizes, and the problems a record's extent can have. Shared by
the torch, safetensors, legacy, TorchScript and DCP readers; nothing here parses a file."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

from .._dataclass import dataclass
from .. import _crc32c
from .._exceptions import CorruptCheckpointError, ReaderError
from ._zip_records import ArchiveRecord, ZipArchive

__all__ = [
    "DTYPE_ALIASES",
    "DTYPE_ITEMSIZE",
    "STORAGE_DTYPES",
    "ExtentProblem",
    "RecordProblem",
    "StorageRef",
    "StoredTensor",
    "TensorRef",
    "TorchClass",
    "TorchDType",
    "TorchStorageType",
    "extent_problems",
]

DTYPE_ITEMSIZE: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
    "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
}  # fmt: skip
"""Canonical dtype name (as `str(torch.dtype)` prints it, without `torch.`) → bytes per element."""


DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "cfloat": "complex64",
    "cdouble": "complex128", "chalf": "complex32", "short": "int16", "int": "int32", "long": "int64",
}  # fmt: skip


STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "UntypedStorage": "uint8",
}  # fmt: skip


_GATHER_CHUNK = 8 << 20


_LAID_OUT_BEYOND_SPAN = 64 << 20
"""How far an overlapping view's row-major bytes may exceed the storage it spans for `sha256` and
`read_bytes` to lay them out (a small broadcast's); past that they are refused."""


_MAX_ELEMENTS = (1 << 63) - 1
"""torch counts a tensor's elements in an int64: `torch.load` refuses a shape of more."""
_NAMED_TENSORS = 3


@dataclass(frozen=True, slots=True)
class StorageRef:
    """A storage as the pickle's persistent id names it, and the record holding its bytes."""

    key: str
    dtype: str
    numel: int
    """Elements of `dtype` (bytes, for the untyped storages of `_rebuild_tensor_v3`)."""
    location: str
    record: ArchiveRecord
    archive: ZipArchive = field(repr=False, compare=False)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_ITEMSIZE[self.dtype]


class StoredTensor:
    """Base of the tensors a reader leaves in a checkpoint's object tree: this module's `TensorRef`,
    and the tensors a DCP save's metadata records (whose reader a torch.save file does not need)."""

    __slots__ = ()


@dataclass(frozen=True, eq=False, slots=True)
class TensorRef(StoredTensor):
    """A tensor in the file: its type and layout, and where its bytes are. Reading them is explicit."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage: StorageRef
    storage_offset: int
    """In elements of `dtype`, as torch counts it."""
    requires_grad: bool = False
    is_parameter: bool = False
    subclass: str | None = None
    """`module.Class` of a tensor subclass (`_rebuild_from_type_v2`), else None."""
    quantization: tuple[Any, ...] | None = None
    """For quantized tensors: `(qscheme, scale, zero_point)` or `(qscheme, scales, zero_points, axis)`."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Rebuild metadata (`{'conj': True}`) and Python state of parameters or subclasses."""

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def byte_range(self) -> tuple[int, int]:
        """`[start, end)` in the file. For a non-contiguous view this is the span of storage it
        touches, which holds other bytes too (see `is_contiguous`). Raises `CorruptCheckpointError`
        when the span runs past its record (`overrun` says why), so no other record's bytes are read."""
        if (overrun := self.overrun()) is not None:
            raise CorruptCheckpointError(f"{self.storage.archive.path}: {overrun}")
        return self._file_range()

    def overrun(self) -> str | None:
        """Why the tensor or its storage claims more bytes than its record holds, else None. Arithmetic
        on shape, stride and offset only: a broadcast or a 10**12-element claim costs nothing."""
        storage, record = self.storage, self.storage.record
        if storage.nbytes > record.size:
            return (
                f"storage {storage.key} claims {storage.numel} × {storage.dtype} = {storage.nbytes} bytes, "
                f"but its record {storage.archive.root}/{record.name} holds {record.size}"
            )
        if self.numel > _MAX_ELEMENTS:
            return f"shape {list(self.shape)} claims {self.numel} elements, more than torch can address (2**63 - 1)"
        end = self._file_range()[1] - record.offset if self.numel else 0
        if end > storage.nbytes:
            return f"the tensor needs bytes up to {end} of storage {storage.key}, which has {storage.nbytes}"
        return None

    def _file_range(self) -> tuple[int, int]:
        start = self.storage.record.offset + self.storage_offset * self.itemsize
        return start, start + self._span_elements() * self.itemsize

    @property
    def overlaps(self) -> bool:
        """Whether the view has more elements than the storage elements it spans, so that some of
        them are one element read twice: a broadcast (`expand`, stride 0) or an overlapping
        `as_strided`. Its row-major bytes can be far more than the file holds (10**12 elements over
        four bytes): they are never laid out (see `crc32c` and `sha256`)."""
        return self.numel > self._span_elements()

    @property
    def crc32c_is_span(self) -> bool:
        """Whether `crc32c` is that of the tensor's `byte_range` as it lies in the file."""
        return self.is_contiguous or (self.overlaps and not self._only_broadcast)

    @property
    def _only_broadcast(self) -> bool:
        # Its strides of 0 aside, the view reads no more elements than it spans: each element its
        # row-major form repeats is then digested once, and its repeats are combined, not read.
        return math.prod(size for size, stride in zip(self.shape, self.stride) if stride) <= self._span_elements()

    def crc32c(self, value: int = 0) -> int:
        """CRC32C (Castagnoli) of the tensor's bytes, in row-major order and the file's byte order:
        `crc32c(t.contiguous().numpy().tobytes())` on a same-endian machine, for a broadcast
        (stride 0) too, whose repeats are combined rather than read. A view that overlaps otherwise
        (an `as_strided` window sliding over its storage) is digested over the storage it spans, in
        storage order, each byte once: the work is bounded by the bytes present, never by the
        element count the file claims. `value` continues a CRC32C over earlier bytes (the chunks of
        a sharded tensor)."""
        if self.numel == 0:
            return value
        if self.crc32c_is_span:
            start, end = self.byte_range
            chunks: Iterable[memoryview | bytes] = self.storage.archive.stream(start, end - start)
        elif self.overlaps:
            return self._broadcast_crc32c(value)
        else:
            chunks = self._chunks()
        for chunk in chunks:
            value = _crc32c.crc32c(chunk, value)
        return value

    def _broadcast_crc32c(self, value: int) -> int:
        dims = [(size, stride) for size, stride in zip(self.shape, self.stride) if size != 1]
        block_elements, outer = 1, len(dims)
        while outer and dims[outer - 1][1] == block_elements:
            block_elements *= dims[outer - 1][0]
            outer -= 1
        block_bytes = block_elements * self.itemsize
        sub_bytes = [math.prod(size for size, _ in dims[d:]) * self.itemsize for d in range(len(dims) + 1)]
        start, end = self.byte_range
        view = self.storage.archive.view(start, end - start)

        def digest(dim: int, offset: int, value: int) -> int:
            if dim == outer:
                return _crc32c.crc32c(view[offset * self.itemsize : offset * self.itemsize + block_bytes], value)
            size, stride = dims[dim]
            if stride == 0:
                once = digest(dim + 1, offset, 0)
                return _crc32c.crc32c_combine(value, _repeated_crc32c(once, sub_bytes[dim + 1], size), sub_bytes[dim])
            for index in range(size):
                value = digest(dim + 1, offset + index * stride, value)
            return value

        try:
            return digest(0, 0, value)  # as deep as the dimensions of more than one element: at most 63
        finally:
            view.release()

    def sha256(self) -> str:
        """SHA-256 of the bytes `read_bytes` gives."""
        import hashlib  # OpenSSL's bindings take longer to import than `inspect` takes to run

        digest = hashlib.sha256()
        for chunk in self._chunks():
            digest.update(chunk)
        return digest.hexdigest()

    def read_bytes(self) -> bytes:
        """The tensor's bytes, row-major, as stored (byte order: the archive's `byteorder` record).

        Like `sha256`, raises `ReaderError` for a view that `overlaps` and whose row-major bytes
        would be more than 64 MiB beyond the storage it spans: the file does not hold them."""
        return b"".join(bytes(chunk) for chunk in self._chunks())

    def _span_elements(self) -> int:
        if self.numel == 0:
            return 0
        return 1 + sum((size - 1) * stride for size, stride in zip(self.shape, self.stride))

    def _chunks(self) -> Iterator[memoryview | bytes]:
        if self.numel == 0:
            return
        start, end = self.byte_range
        if self.is_contiguous:
            yield from self.storage.archive.stream(start, end - start)
            return
        if self.overlaps and self.nbytes > end - start + _LAID_OUT_BEYOND_SPAN:
            raise ReaderError(
                f"{self.storage.archive.path}: a view of {self.numel} elements over {self._span_elements()} stored ones: "
                "its row-major bytes are not laid out"
            )
        yield from self._gather(start, end)

    def _gather(self, start: int, end: int) -> Iterator[bytes]:
        """Copy a strided view's elements into row-major order, a contiguous inner block at a time."""
        block_elements, outer = 1, len(self.shape)
        while outer and (self.shape[outer - 1] == 1 or self.stride[outer - 1] == block_elements):
            block_elements *= self.shape[outer - 1]
            outer -= 1
        block_bytes = block_elements * self.itemsize
        view = self.storage.archive.view(start, end - start)
        buffer = bytearray()
        try:
            for index in itertools.product(*(range(size) for size in self.shape[:outer])):
                offset = sum(i * s for i, s in zip(index, self.stride)) * self.itemsize
                buffer += view[offset : offset + block_bytes]
                if len(buffer) >= _GATHER_CHUNK:
                    yield bytes(buffer)
                    buffer.clear()
        finally:
            view.release()
        if buffer:
            yield bytes(buffer)


def _repeated_crc32c(value: int, length: int, count: int) -> int:
    """CRC32C of `count` copies of `length` bytes whose CRC32C is `value`, in log2(count) steps."""
    result = 0
    while count:
        if count & 1:
            result = _crc32c.crc32c_combine(result, value, length)
        count >>= 1
        if count:
            value, length = _crc32c.crc32c_combine(value, value, length), length * 2
    return result


@dataclass(frozen=True, slots=True)
class ExtentProblem:
    """A tensor whose layout or storage claims more bytes than its record holds; its bytes are never read."""

    file: Path
    pointer: str
    message: str
    """What is wrong, without the file or the pointer."""

    code: ClassVar[str] = "tensor-out-of-bounds"

    def __str__(self) -> str:
        return f"{self.file}: tensor {self.pointer}: {self.message}"


@dataclass(frozen=True, slots=True)
class RecordProblem:
    """A record whose bytes no longer have the CRC-32 the zip directory records for them."""

    file: Path
    record: str
    """Its name in the archive, root included: `archive/data.pkl`, `archive/data/3`."""
    byte_range: tuple[int, int]
    stored_crc32: int
    computed_crc32: int
    pointers: tuple[str, ...] = ()
    """The tensors whose bytes the record holds, in document order (none for `data.pkl` and the like)."""

    code: ClassVar[str] = "checksum-mismatch"

    @property
    def mismatch(self) -> str:
        start, end = self.byte_range
        return f"checksum mismatch: stored crc32 {self.stored_crc32:08x}, computed {self.computed_crc32:08x} over bytes {start}..{end}"

    @property
    def message(self) -> str:
        """What is wrong, without the file: the record, the mismatch and the tensors stored in it."""
        held = f"; it holds {_named(self.pointers)}" if any(self.pointers) else ""  # "" is an archive that is one tensor
        return f"record {self.record}: {self.mismatch}{held}"

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


def _named(pointers: tuple[str, ...]) -> str:
    shown = ", ".join(pointers[:_NAMED_TENSORS])
    more = f" and {len(pointers) - _NAMED_TENSORS} more" if len(pointers) > _NAMED_TENSORS else ""
    return f"tensor{'s' if len(pointers) > 1 else ''} {shown}{more}"


def extent_problems(path: Path, tensors: Iterable[tuple[str, TensorRef]]) -> list[ExtentProblem]:
    """Tensors (of a checkpoint at `path`) that claim more bytes than their record holds, in document order."""
    return [ExtentProblem(path, pointer, overrun) for pointer, tensor in tensors if (overrun := tensor.overrun()) is not None]


@dataclass(frozen=True, slots=True)
class TorchDType:
    """`torch.<dtype>` named in a pickle."""

    name: str


@dataclass(frozen=True, slots=True)
class TorchStorageType:
    """`torch.FloatStorage` and friends: only their element type matters."""

    dtype: str


@dataclass(frozen=True, slots=True)
class TorchClass:
    """`torch.Tensor` / `torch.nn.parameter.Parameter` as a value (`_rebuild_from_type_v2`)."""

    qualname: str
