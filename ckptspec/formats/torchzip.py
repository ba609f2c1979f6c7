"""Read a `torch.save` zip archive without torch and without running its pickle.

    with open_torch_checkpoint("epoch=1-step=8.ckpt") as checkpoint:
        for pointer, tensor in checkpoint.tensors():      # "/state_dict/l.weight", TensorRef
            print(pointer, tensor.dtype, tensor.shape, hex(tensor.crc32c()))
        dangerous = [g for g in checkpoint.globals if g.safety == "dangerous"]

The object tree is what `torch.load(weights_only=False)` would return, with every tensor replaced by
a `TensorRef` (where its bytes lie in the file), every `OrderedDict` by a `PickledDict`, and every class
ckptspec does not know by an inert `Stub`. Tensor bytes are only read when a `TensorRef` is asked for
them, or when `checkpoint.verify()` checks each record against the CRC-32 the zip directory records.
The format is described in docs/formats/torch.md.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import reprlib
import sys
import zlib
import functools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from .. import _crc32c

from .._storage import location
from .._exceptions import AmbiguousArchiveError, CorruptCheckpointError, ReaderError, UnsupportedFormatError
from .._pointer import escape_segment
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._pickle_safety import PickleReadStopped, Stub, global_refs, load_untrusted, scan_pickle, stub_class
from ._pickle_values import GENERIC_BUILDERS, PickledNamespace, charge_copy
from ._names import TORCHSCRIPT_CONSTANTS
from ._zip_records import ArchiveRecord, ZipArchive

__all__ = [
    "DTYPE_ITEMSIZE",
    "ExtentProblem",
    "RecordProblem",
    "StorageRef",
    "StoredTensor",
    "TensorRef",
    "TorchCheckpoint",
    "TorchClass",
    "TorchDType",
    "TorchStorageType",
    "extent_problems",
    "inspect_torch_checkpoint",
    "iter_tensors",
    "open_torch_checkpoint",
    "plain_components",
    "resolve_pointer",
    "unpickle_untrusted",
    "walk",
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

_DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "cfloat": "complex64",
    "cdouble": "complex128", "chalf": "complex32", "short": "int16", "int": "int32", "long": "int64",
}  # fmt: skip
_STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "UntypedStorage": "uint8",
}  # fmt: skip
_QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
             "per_channel_affine_float_qparams")  # fmt: skip
_DEFLATED = 8
_MAX_INFLATED_PICKLE = 64 << 20
_MAX_INFLATE_RATIO = 1024
"""deflate expands at most about 1032:1; inflating a deflated data.pkl stops at that much of its size."""
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


class TorchCheckpoint:
    """An opened torch.save archive: the object tree, its tensors and the globals its pickle names.

    Close it (or use `with`) when done; `TensorRef`s read their bytes through it while it is open.
    """

    def __init__(self, path: str | Path, start: int = 0, end: int | None = None) -> None:
        """`[start, end)`: where the archive lies when it is embedded in a larger file (a DCP slice)."""
        self.path = location(path)
        self.pickle_protocol = 0
        self._archive = ZipArchive(self.path, start, end)
        try:
            self._refuse_other_torch_archives()
            self.tree, self.globals = self._unpickle()
        except BaseException:
            self._archive.close()
            raise

    def __enter__(self) -> TorchCheckpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._archive.close()

    @property
    def archive_root(self) -> str:
        return self._archive.root

    @property
    def byteorder(self) -> str:
        """`little` or `big`: the order tensor bytes are stored in (absent record → little)."""
        return self._small_record("byteorder") or "little"

    @property
    def metadata(self) -> dict[str, Any]:
        """Archive facts: root folder, zip format `version`, byte order, pickle protocol."""
        facts: dict[str, Any] = {
            "archive_root": self.archive_root,
            "torch_zip_version": self._small_record("version") or self._small_record(".data/version"),
            "byteorder": self.byteorder,
            "pickle_protocol": self.pickle_protocol,
        }
        if (alignment := self._small_record(".storage_alignment")) is not None:
            facts["storage_alignment"] = alignment
        return facts

    def tensors(self) -> Iterator[tuple[str, TensorRef]]:
        """Every tensor with its JSON Pointer, in document order."""
        return iter_tensors(self.tree, f"{self.path}: data.pkl", self.globals)

    def resolve(self, pointer: str) -> Any:
        return resolve_pointer(self.tree, pointer)

    def verify(self, trusted: Collection[str] = ()) -> list[RecordProblem]:
        """Records whose bytes do not match the CRC-32 the zip directory records, in archive order.

        `trusted` names tensors (by pointer) whose bytes the caller verifies itself, e.g. against a
        manifest's CRC32C: a storage record all of whose tensors are trusted is not read a second
        time. Every other record is (`data.pkl`, `byteorder`, optimizer state, ...). Bytes are
        streamed in bounded chunks; nothing is checked when the writer recorded no CRC-32s (see
        `ZipArchive.records_crc32`).
        """
        if not self._archive.records_crc32:
            return []
        trusted = frozenset(trusted)
        problems = []
        for record in self._archive.records.values():
            pointers = self._pointers_in(record)
            if pointers and trusted.issuperset(pointers):
                continue
            computed = self._archive.crc32(record)
            if computed != record.crc32:
                problems.append(self._record_problem(record, computed))
        return problems

    def _pointers_in(self, record: ArchiveRecord) -> tuple[str, ...]:
        return self._pointers_by_record.get(record.name, ())

    @functools.cached_property
    def _pointers_by_record(self) -> dict[str, tuple[str, ...]]:
        by_record: dict[str, list[str]] = {}
        for pointer, tensor in self.tensors():
            by_record.setdefault(tensor.storage.record.name, []).append(pointer)
        return {name: tuple(pointers) for name, pointers in by_record.items()}

    def _record_problem(self, record: ArchiveRecord, computed: int) -> RecordProblem:
        return RecordProblem(
            file=self.path,
            record=f"{self._archive.root}/{record.name}",
            byte_range=(record.offset, record.end),
            stored_crc32=record.crc32,
            computed_crc32=computed,
            pointers=self._pointers_in(record),
        )

    def _refuse_other_torch_archives(self) -> None:
        if self._archive.record(TORCHSCRIPT_CONSTANTS) is not None:
            raise UnsupportedFormatError(
                f"{self.path}: TorchScript archive (torch.jit.save, has constants.pkl); ckptspec reads "
                "torch.save checkpoints only"
            )
        try:
            self._archive.require_stored()
        except AmbiguousArchiveError as exc:
            exc.globals = self._deflated_pickle_globals()  # refused, yet what torch would unpickle is named
            raise

    def _deflated_pickle_globals(self) -> list[GlobalRef]:
        """The globals of `data.pkl` as torch would inflate it, when it is stored deflated; inflated
        within a bound, since a few compressed bytes can claim gigabytes."""
        record = self._archive.record("data.pkl")
        if record is None or record.method != _DEFLATED:
            return []
        limit = min(_MAX_INFLATED_PICKLE, max(record.size, 1) * _MAX_INFLATE_RATIO)
        try:
            data = zlib.decompressobj(-zlib.MAX_WBITS).decompress(self._archive.read(record.offset, record.size), limit)
        except zlib.error:
            return []
        return global_refs(scan_pickle(data).globals)

    def _unpickle(self) -> tuple[Any, list[GlobalRef]]:
        pickle_record = self._archive.record("data.pkl")
        assert pickle_record is not None
        data = self._archive.read(pickle_record.offset, pickle_record.size)
        self.pickle_protocol = data[1] if data[:1] == b"\x80" and len(data) > 1 else 0
        factory = _TensorFactory(self.path, self._archive)
        try:
            loaded = _restricted_load(data, f"{self.path}: data.pkl", factory)
        except CorruptCheckpointError as exc:
            exc.args = (f"{exc}{self._damage_note(pickle_record, data)}",)  # the same error: it may carry the globals seen
            raise
        return loaded

    def _damage_note(self, record: ArchiveRecord, data: bytes) -> str:
        """Why a pickle that does not read may not be torch's fault: its bytes changed after writing."""
        computed = zlib.crc32(data)
        if not self._archive.records_crc32 or computed == record.crc32:
            return ""
        return f" (its CRC-32 is {computed:08x}, not the {record.crc32:08x} the zip directory records: the bytes were damaged)"

    def _small_record(self, name: str) -> str | None:
        record = self._archive.record(name)
        if record is None or record.size > 256:
            return None
        return self._archive.read(record.offset, record.size).decode("utf-8", "replace").strip()


def open_torch_checkpoint(path: str | Path) -> TorchCheckpoint:
    """Open a torch.save zip archive (`.pt`, `.pth`, Lightning `.ckpt`) and unpickle it safely.

    Raises:
        UnsupportedFormatError: legacy (pre-1.6) files, TorchScript archives, DCP directories.
        CorruptCheckpointError: empty, truncated, bad zip directory, missing or short records.
    """
    _refuse_non_zip(location(path))
    return TorchCheckpoint(path)


def _refuse_non_zip(path: Path) -> None:
    from .detect import KINDS, detect

    if path.is_dir():
        detect(path)
        raise UnsupportedFormatError(f"{path}: a directory, not a torch.save file")
    found = detect(path)
    if found.kind != "torch-zip":
        raise UnsupportedFormatError(f"{path}: {KINDS[found.kind].description}, not a torch.save archive")


_TORCH_BUILDERS: dict[tuple[str, str], Callable[[], object]] = {
    ("torch", "Size"): lambda: _build_size,
    ("torch", "device"): lambda: _build_device,
    ("torch", "Tensor"): lambda: TorchClass("torch.Tensor"),
    ("torch.nn.parameter", "Parameter"): lambda: TorchClass("torch.nn.parameter.Parameter"),
    **{("torch", name): functools.partial(TorchDType, name) for name in DTYPE_ITEMSIZE},
    **{("torch", alias): functools.partial(TorchDType, name) for alias, name in _DTYPE_ALIASES.items()},
    **{("torch", scheme): lambda name=f"torch.{scheme}": name for scheme in _QSCHEMES},
    **{(module, name): functools.partial(TorchStorageType, dtype) for name, dtype in _STORAGE_DTYPES.items()
       for module in ("torch", "torch.storage", "torch.cuda")},
}  # fmt: skip
"""What `find_class` returns for torch's own names, each made anew for every pickle (see `_Builders`)."""


class _Builders(dict[tuple[str, str], object]):
    """A pickle's builders, torch's values among them made on first lookup. A pickle can BUILD into
    a value it names (a frozen dataclass's `__setstate__` writes its fields), so no value is shared
    between pickles; a pickle names a few of the hundred, so only those are made."""

    def __missing__(self, key: tuple[str, str]) -> object:
        value = self[key] = _TORCH_BUILDERS[key]()
        return value

    def get(self, key: tuple[str, str], default: object = None) -> object:  # type: ignore[override]
        return self[key] if key in self else default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in _TORCH_BUILDERS


class _TensorFactory:
    """The builders `find_class` may return for torch names, bound to one archive for messages."""

    def __init__(self, path: Path, archive: ZipArchive | None) -> None:
        self._path = path
        self._archive = archive
        self._storages: dict[str, StorageRef] = {}
        self.builders: dict[tuple[str, str], object] = _Builders({**GENERIC_BUILDERS, **self._tensor_builders()})

    def _tensor_builders(self) -> dict[tuple[str, str], object]:
        builders: dict[tuple[str, str], object] = {
            ("torch._utils", "_rebuild_tensor"): self.rebuild_tensor,
            ("torch._utils", "_rebuild_tensor_v2"): self.rebuild_tensor_v2,
            ("torch._utils", "_rebuild_tensor_v3"): self.rebuild_tensor_v3,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
            ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
            ("torch._utils", "_rebuild_qtensor"): self.rebuild_qtensor,
            ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
        }
        if self._archive is None:
            # `pickle.dump` of a tensor stores its bytes in the pickle (`torch.storage._load_from_bytes`),
            # with no archive to locate them in: record such tensors inertly instead of refusing them.
            return {key: stub_class(*key) for key in builders}
        return builders

    def load_storage(self, pid: Any) -> StorageRef:
        """The persistent id `("storage", storage_type, key, location, numel)` → its record."""
        if self._archive is None:
            raise CorruptCheckpointError(
                f"{self._path}: names torch storage {_short(pid)} but is not inside a torch archive"
            )
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise CorruptCheckpointError(f"{self._path}: data.pkl: persistent id {_short(pid)} is not a torch storage")
        _, storage_type, key, location, numel = pid
        if not isinstance(storage_type, TorchStorageType):
            raise CorruptCheckpointError(f"{self._path}: data.pkl: storage {key!r} has unknown type {_short(storage_type)}")
        if not (isinstance(key, str) and isinstance(numel, int) and numel >= 0):
            raise CorruptCheckpointError(f"{self._path}: data.pkl: malformed storage id {_short(pid)}")
        if key in self._storages:
            return self._storages[key]
        record = self._archive.record(f"data/{key}")
        if record is None:
            raise CorruptCheckpointError(f"{self._path}: missing record {self._archive.root}/data/{key} (storage {key})")
        storage = StorageRef(key, storage_type.dtype, numel, str(location), record, self._archive)
        self._storages[key] = storage
        return storage

    def rebuild_tensor(self, storage: Any, storage_offset: Any, size: Any, stride: Any) -> TensorRef:
        return self._tensor(storage, storage_offset, size, stride, None)

    def rebuild_tensor_v2(
        self, storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any = False,
        backward_hooks: Any = None, metadata: Any = None,
    ) -> TensorRef:  # fmt: skip
        return self._tensor(storage, storage_offset, size, stride, None, requires_grad=bool(requires_grad), extra=_as_extra(metadata))

    def rebuild_tensor_v3(
        self, storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any,
        backward_hooks: Any, dtype: Any, metadata: Any = None,
    ) -> TensorRef:  # fmt: skip
        if not isinstance(dtype, TorchDType):
            raise CorruptCheckpointError(f"{self._path}: data.pkl: _rebuild_tensor_v3 with dtype {_short(dtype)}")
        return self._tensor(storage, storage_offset, size, stride, dtype.name, requires_grad=bool(requires_grad), extra=_as_extra(metadata))

    def rebuild_qtensor(
        self, storage: Any, storage_offset: Any, size: Any, stride: Any, quantizer_params: Any,
        requires_grad: Any, backward_hooks: Any,
    ) -> TensorRef:  # fmt: skip
        tensor = self._tensor(storage, storage_offset, size, stride, None)
        quantization = tuple(quantizer_params) if isinstance(quantizer_params, tuple) else (quantizer_params,)
        return replace(tensor, requires_grad=bool(requires_grad), quantization=quantization)

    def _tensor(self, storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None, **fields: Any) -> TensorRef:
        """The tensor on `storage` with the layout given, and any other of its `fields` (`requires_grad`, `extra`)."""
        if not isinstance(storage, StorageRef):
            raise CorruptCheckpointError(f"{self._path}: data.pkl: tensor rebuilt from {_short(storage)}, not a storage")
        shape, strides = _int_tuple(size), _int_tuple(stride)
        if shape is None or strides is None or len(shape) != len(strides) or not isinstance(offset, int) or offset < 0:
            raise CorruptCheckpointError(
                f"{self._path}: data.pkl: tensor on storage {storage.key} has malformed layout "
                f"(offset {_short(offset)}, size {_short(size)}, stride {_short(stride)})"
            )
        return TensorRef(dtype or storage.dtype, shape, strides, storage, offset, **fields)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any, state: Any = None) -> Any:
    if not isinstance(data, TensorRef):
        return data
    extra = {**data.extra, "state": state} if state else data.extra
    return replace(data, requires_grad=bool(requires_grad), is_parameter=True, extra=extra)


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    result = func(*args)
    if not isinstance(result, TensorRef):
        return result
    qualname = _class_qualname(new_type)
    extra = {**result.extra, "state": state} if state else result.extra
    if qualname == "torch.nn.parameter.Parameter":
        return replace(result, is_parameter=True, extra=extra)
    return replace(result, subclass=None if qualname == "torch.Tensor" else qualname, extra=extra)


def _class_qualname(value: Any) -> str | None:
    if isinstance(value, TorchClass):
        return value.qualname
    if isinstance(value, type) and issubclass(value, Stub):
        return f"{value.module}.{value.name}"
    return None


def _build_size(dims: Any = ()) -> tuple[int, ...]:
    shape = _int_tuple(dims)
    if shape is None:
        raise TypeError("torch.Size of non-integers")
    return shape


def _build_device(kind: Any, index: Any = None) -> str:
    """`torch.device` as its string form (`cpu`, `cuda:0`)."""
    return str(kind) if index is None else f"{kind}:{index}"


def _int_tuple(values: Any) -> tuple[int, ...] | None:
    if not isinstance(values, (tuple, list)):
        return None
    charge_copy(len(values))  # one memo-shared layout of a million dimensions, named by every tensor
    return tuple(values) if all(type(v) is int and v >= 0 for v in values) else None


def _as_extra(metadata: Any) -> dict[str, Any]:
    return dict(metadata) if isinstance(metadata, dict) and metadata else {}


def _short(value: Any) -> str:
    # reprlib stops at a few elements per level and a few levels: a list shared at every level of a
    # persistent id (a "billion laughs") must cost those, never its expansion.
    text = reprlib.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unpickle_untrusted(data: bytes, source: str = "<pickle>") -> tuple[Any, list[GlobalRef]]:
    """Unpickle bytes that are not inside a torch archive (a bare `.pkl`) with the same restricted
    unpickler: returns the first pickle's tree and every global the pickles in `data` name (a stream
    of concatenated pickles is judged whole). Persistent ids are refused; tensors pickled with
    `pickle.dump` become inert stubs of torch's rebuild functions, not `TensorRef`s."""
    factory = _TensorFactory(location(source), None)
    return load_untrusted(data, source, factory.builders, factory.load_storage, stream=True)


def _restricted_load(data: bytes, source: str, factory: _TensorFactory) -> tuple[Any, list[GlobalRef]]:
    return load_untrusted(data, source, factory.builders, factory.load_storage)


# --- walking the tree ----------------------------------------------------------------------------


def _segment(key: Any) -> str:
    return escape_segment(key if isinstance(key, str) else str(key) if type(key) is int else repr(key))


def _children(value: Any) -> Iterator[tuple[Any, Any]] | None:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return enumerate(value)
    if isinstance(value, Stub):
        return value.children()
    if isinstance(value, PickledNamespace):
        return iter(value.attributes.items())
    return None


_Path = tuple[Any, Any] | None
"""Where a node lies: `(parent's path, key)`, None for the root. A pointer is rendered from it only
where one is asked for: building one for every node would cost the sum of their depths."""

_POINTER_CHARACTERS_PER_NODE = 256
_POINTER_ALLOWANCE = 1 << 20
"""Tensor pointers rendered by one walk may take this many characters per node walked, and this many
more: far beyond any real checkpoint's, whose tensors sit a few levels deep, yet linear in the tree.
A tensor shared at every place of a list nested a million levels deep would need quadratically many."""


def _nodes(tree: Any) -> Iterator[tuple[_Path, Any, int]]:
    """Every node with its path and depth, depth first in document order; a container reached twice
    (shared, or a cycle) is expanded only the first time. Iterative: nesting costs no recursion."""
    expanded: set[int] = set()
    pending: list[tuple[_Path, Any, int]] = [(None, tree, 0)]
    while pending:
        path, value, depth = pending.pop()
        yield path, value, depth
        children = _children(value)
        if children is None or id(value) in expanded:
            continue
        expanded.add(id(value))
        pending.extend(reversed([((path, key), child, depth + 1) for key, child in children]))


def _render(path: _Path) -> str:
    segments = []
    while path is not None:
        path, key = path
        segments.append(_segment(key))
    return "".join("/" + segment for segment in reversed(segments))


def walk(tree: Any) -> Iterator[tuple[str, Any]]:
    """Every node with its JSON Pointer, depth first in document order.

    Dict keys that are not strings become `str(int)` or `repr(key)`. Below a `Stub` the segments are
    `args`, `kwargs`, `state`, `items`, `list_items`, `attributes`; below a Namespace, its attributes.
    A container reached twice (shared, or a cycle) is expanded only the first time. Every pointer is
    rendered, which costs the sum of the nodes' depths: readers look for tensors with `iter_tensors`.
    """
    expanded: set[int] = set()
    pending: list[tuple[str, Any]] = [("", tree)]
    while pending:
        pointer, value = pending.pop()
        yield pointer, value
        children = _children(value)
        if children is None or id(value) in expanded:
            continue
        expanded.add(id(value))
        pending.extend(reversed([(f"{pointer}/{_segment(key)}", child) for key, child in children]))


def iter_tensors(tree: Any, source: str = "the object tree", globals_named: Iterable[GlobalRef] = ()) -> Iterator[tuple[str, TensorRef]]:
    """`(pointer, TensorRef)` for every tensor in the tree, in document order, in time linear in the
    tree: only tensors' pointers are rendered, and when those would outgrow the tree
    (`_POINTER_CHARACTERS_PER_NODE`) the tree is refused as unreadable (`source` names it), carrying
    `globals_named` (what the pickle names), since reading the tree has run them all."""
    budget = _POINTER_ALLOWANCE
    for path, value, depth in _nodes(tree):
        budget += _POINTER_CHARACTERS_PER_NODE
        if isinstance(value, TensorRef):
            pointer = _render(path)
            budget -= len(pointer)
            if budget < 0:
                raise PickleReadStopped(
                    f"{source}: tensors sit {depth} levels deep, so many times that their pointers would take more"
                    f" than {_POINTER_CHARACTERS_PER_NODE} characters for each value of the tree; no checkpoint nests its tensors so",
                    list(globals_named),
                )
            yield pointer, value


def resolve_pointer(tree: Any, pointer: str) -> Any:
    """The node at a JSON Pointer produced by `walk` (raises KeyError when there is none)."""
    node = tree
    for segment in pointer.split("/")[1:] if pointer else []:
        for key, child in _children(node) or iter(()):
            if _segment(key) == segment:
                node = child
                break
        else:
            raise KeyError(pointer)
    return node


# --- inspection ------------------------------------------------------------------------------------

_PLAIN_COMPONENT_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("model", "model_state_dict", "state_dict", "model_state", "net", "module", "weights"),
    "optimizer": ("optimizer", "optimizer_state_dict", "optimizer_states", "optim", "opt"),
    "scheduler": ("scheduler", "lr_scheduler", "scheduler_state_dict", "lr_schedulers", "schedulers"),
    "scaler": ("scaler", "grad_scaler", "scaler_state_dict", "amp"),
    "ema": ("ema", "ema_state_dict", "model_ema", "ema_model", "state_dict_ema"),
    "rng": ("rng", "rng_state", "rng_states", "random_state"),
    "data_position": ("data_position", "sampler", "dataloader", "sampler_state"),
    "config": ("config", "cfg", "args", "hparams", "hyper_parameters"),
}


_RNG_KEYS = frozenset({"python", "numpy", "cpu", "torch", "cuda", "mps", "xla", "xpu", "npu", "hpu", "mlu", "musa"})
"""Keys of a dict of generator states saved on its own (a Hugging Face Trainer's rng_state.pth)."""


def plain_components(tree: Any) -> dict[str, str]:
    """Where a plain torch.save dict keeps each component, by its usual key names. A file may hold
    one component whole: a module's state dict (a DCP save's tensors too), or the state dict of an
    optimizer, scheduler or grad scaler, or generator states, each saved to its own file."""
    if not isinstance(tree, dict):
        return {}
    whole = _whole_component(tree)
    if whole is not None:
        return {whole: ""}
    components: dict[str, str] = {}
    for component, keys in _PLAIN_COMPONENT_KEYS.items():
        for key in keys:
            if key in tree:
                components[component] = "/" + escape_segment(key)
                break
    return components


def _whole_component(tree: dict[Any, Any]) -> str | None:
    """The component a dict is by its own keys (as each class's `state_dict()` writes them), if any."""
    keys = tree.keys()
    if {"state", "param_groups"} <= keys:
        return "optimizer"
    if isinstance(tree.get("last_epoch"), int) and "base_lrs" in keys:
        return "scheduler"
    if {"scale", "_growth_tracker"} <= keys:
        return "scaler"
    if len(keys) > 1 and keys <= _RNG_KEYS:
        return "rng"
    has_tensor = any(isinstance(value, StoredTensor) for value in tree.values())
    return "model" if has_tensor and all(_state_dict_entry(value) for value in tree.values()) else None


def _state_dict_entry(value: Any) -> bool:
    """A value a module's state dict holds: a tensor, or what quantized and sparse modules save
    besides (a dtype, a tuple of packed tensors, a rebuilt sparse tensor)."""
    if isinstance(value, (StoredTensor, TorchDType)) or _is_sparse(value):
        return True
    # One level only: packed parameters are a flat tuple.
    return isinstance(value, tuple) and all(isinstance(item, (TensorRef, TorchDType)) or item is None for item in value)


def _is_sparse(value: Any) -> bool:
    return isinstance(value, Stub) and (value.module, value.name) == ("torch._utils", "_rebuild_sparse_tensor")


def _component_of(pointer: str, components: dict[str, str]) -> str | None:
    best: tuple[int, str] | None = None
    for name, at in components.items():
        if (pointer == at or pointer.startswith(at + "/")) and (best is None or len(at) > best[0]):
            best = (len(at), name)
    return best[1] if best else None


def extent_problems(path: Path, tensors: Iterable[tuple[str, TensorRef]]) -> list[ExtentProblem]:
    """Tensors (of a checkpoint at `path`) that claim more bytes than their record holds, in document order."""
    return [ExtentProblem(path, pointer, overrun) for pointer, tensor in tensors if (overrun := tensor.overrun()) is not None]


def inspect_torch_checkpoint(path: str | Path) -> Inspection:
    """Summarise a torch.save or Lightning checkpoint without reading any tensor bytes."""
    from .lightning import LightningCheckpoint

    with open_torch_checkpoint(path) as checkpoint:
        if problems := extent_problems(checkpoint.path, checkpoint.tensors()):
            more = f" (and {len(problems) - 1} more tensors)" if len(problems) > 1 else ""
            raise CorruptCheckpointError(f"{problems[0]}{more}")
        metadata = checkpoint.metadata
        lightning = LightningCheckpoint.recognise(checkpoint.tree)
        if lightning is not None:
            components = lightning.components()
            metadata.update(lightning.summary())
        else:
            components = plain_components(checkpoint.tree)
        tensors = [
            TensorSummary(pointer, tensor.dtype, tensor.shape, tensor.nbytes, _component_of(pointer, components))
            for pointer, tensor in checkpoint.tensors()
        ]
        return Inspection(
            path=str(checkpoint.path),
            format="lightning" if lightning is not None else "torch",
            files=[FileSummary(str(checkpoint.path), checkpoint.path.stat().st_size)],
            tensors=tensors,
            globals=checkpoint.globals,
            metadata=metadata,
            components=components,
        )


def _main(arguments: list[str]) -> int:
    """`python -m ckptspec.formats.torchzip PATH [--crc32c]`: the inspection as JSON (for benchmarks)."""
    path, with_crc = arguments[0], "--crc32c" in arguments[1:]
    try:
        document = inspect_torch_checkpoint(path).to_json(include_tensors=True)
        if with_crc:
            with open_torch_checkpoint(path) as checkpoint:
                document["crc32c"] = {pointer: f"{t.crc32c():08x}" for pointer, t in checkpoint.tensors()}
    except ReaderError as exc:
        print(exc, file=sys.stderr)
        return 1
    json.dump(document, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
