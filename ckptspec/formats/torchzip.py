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

import json
import reprlib
import sys
import zlib
import functools
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._crc32 import crc32
from .._storage import location
from .._exceptions import AmbiguousArchiveError, CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._reader import TensorReader
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._pickle_safety import Stub, global_refs, load_untrusted, stub_class
from ._pickle_scan import scan_pickle
from ._pickle_values import GENERIC_BUILDERS, charge_copy
from ._names import TORCHSCRIPT_CONSTANTS
from ._tensors import (
    DTYPE_ALIASES,
    DTYPE_ITEMSIZE,
    STORAGE_DTYPES,
    RecordProblem,
    StorageRef,
    TensorRef,
    TorchClass,
    TorchDType,
    TorchStorageType,
    extent_problems,
)
from ._tree import component_of, iter_tensors, plain_components, resolve_pointer
from ._zip_records import ArchiveRecord, ZipArchive

__all__ = ["TorchCheckpoint", "inspect_torch_checkpoint", "open_torch_checkpoint", "unpickle_untrusted"]


_QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
             "per_channel_affine_float_qparams")  # fmt: skip
_DEFLATED = 8
_MAX_INFLATED_PICKLE = 64 << 20
_MAX_INFLATE_RATIO = 1024
"""deflate expands at most about 1032:1; inflating a deflated data.pkl stops at that much of its size."""


class TorchCheckpoint(TensorReader):
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
        except AmbiguousArchiveError as exc:  # refused, yet what torch would unpickle is named
            raise AmbiguousArchiveError(str(exc), globals_named=self._deflated_pickle_globals()) from None

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
        computed = crc32(data)
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
    **{("torch", alias): functools.partial(TorchDType, name) for alias, name in DTYPE_ALIASES.items()},
    **{("torch", scheme): lambda name=f"torch.{scheme}": name for scheme in _QSCHEMES},
    **{(module, name): functools.partial(TorchStorageType, dtype) for name, dtype in STORAGE_DTYPES.items()
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


# --- inspection ------------------------------------------------------------------------------------


def inspect_torch_checkpoint(path: str | Path) -> Inspection:
    """Summarise a torch.save or Lightning checkpoint without reading any tensor bytes."""
    from .lightning import LightningCheckpoint

    with open_torch_checkpoint(path) as checkpoint:
        found = list(checkpoint.tensors())  # walked once: the tree may nest as deep as the file is long
        if problems := extent_problems(checkpoint.path, found):
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
            TensorSummary(pointer, tensor.dtype, tensor.shape, tensor.nbytes, component_of(pointer, components))
            for pointer, tensor in found
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
