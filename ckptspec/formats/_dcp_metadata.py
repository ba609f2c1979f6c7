"""The `.metadata` pickle of a torch.distributed.checkpoint (DCP) directory, read without torch.

torch writes it with a plain `pickle.dump` and reads it with a plain `pickle.load`; here it goes
through the restricted unpickler with an allow-list of exactly the classes DCP pickles (torch 2.2 to
2.13 locations). Each allowed class is an inert stub that records its NEWOBJ arguments and BUILD
state, which `parse_metadata` then checks value by value: nothing in the file is trusted to have
the type it claims.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._exceptions import CorruptCheckpointError
from ._inspection import GlobalRef
from ._pickle_safety import Stub, load_untrusted, stub_class
from ._tensors import DTYPE_ALIASES, StoredTensor

__all__ = [
    "DTYPE_NAMES",
    "KNOWN_VERSIONS",
    "BytesItem",
    "Chunk",
    "DcpMetadata",
    "SliceLocation",
    "TensorItem",
    "parse_metadata",
    "unpickle_metadata",
]

KNOWN_VERSIONS = frozenset({None, "1.0.0"})
"""`Metadata.version` values whose layout this reader knows (None: written before torch 2.9)."""

_DCP = "torch.distributed.checkpoint.metadata"
_SHARD = "torch.distributed._shard.sharded_tensor.metadata"  # TensorProperties before torch 2.3
_STUBBED = (
    (_DCP, "Metadata"),
    (_DCP, "TensorStorageMetadata"),
    (_DCP, "BytesStorageMetadata"),
    (_DCP, "ChunkStorageMetadata"),
    (_DCP, "TensorProperties"),
    (_DCP, "MetadataIndex"),
    (_DCP, "StorageMeta"),
    (_DCP, "_MEM_FORMAT_ENCODING"),
    (_SHARD, "TensorProperties"),
    (_SHARD, "MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
)
_DTYPES = (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "uint16", "uint32", "uint64", "qint8", "quint8", "qint32", "double", "float", "half", "long", "int",
    "short", "cfloat", "cdouble",
)  # fmt: skip
DTYPE_NAMES = frozenset(DTYPE_ALIASES.get(name, name) for name in _DTYPES)
"""The dtypes this reader knows in `.metadata`, as it names them (`float32`, not `float`)."""


@dataclass(frozen=True)
class _DType:
    name: str


def _size(dims: Any = ()) -> tuple[Any, ...]:
    return tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)


def _layout(name: Any) -> str:
    return str(name)


def _path(*parts: Any) -> str:
    return "/".join(str(part) for part in parts)


def _builders() -> dict[tuple[str, str], object]:
    builders: dict[tuple[str, str], object] = {key: stub_class(*key) for key in _STUBBED}
    builders[("torch", "Size")] = _size
    builders[("torch.serialization", "_get_layout")] = _layout
    for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"):
        builders[("pathlib", name)] = _path
    for name in _DTYPES:
        builders[("torch", name)] = _DType(DTYPE_ALIASES.get(name, name))
    return builders


def _no_persistent_ids(pid: Any) -> Any:
    raise CorruptCheckpointError(f"names a persistent id {str(pid)[:60]!r}; DCP metadata has none")


def unpickle_metadata(data: bytes, source: Path) -> tuple[Any, list[GlobalRef]]:
    """The `.metadata` pickle as inert objects, and every global it names with its safety.

    Raises `PickleReadStopped` (a `CorruptCheckpointError`) naming `source`, and the globals named
    before reading stopped, when it cannot be read."""
    return load_untrusted(data, f"{source}:", _builders(), _no_persistent_ids)


@dataclass(frozen=True)
class SliceLocation:
    """Where one item's bytes lie: a file of the directory, and a byte range in it."""

    file: str
    offset: int
    length: int
    transforms: tuple[str, ...] = ()
    """DCP storage extensions (compression, ...) applied to the bytes; empty for plain slices."""


@dataclass(frozen=True)
class Chunk:
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    location: SliceLocation | None
    """None when the metadata records no storage for the chunk."""

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)


@dataclass(frozen=True)
class TensorItem(StoredTensor):
    fqn: str
    path: tuple[str | int, ...]
    """Where the tensor sits in the saved state dict (DCP's `planner_data`)."""
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    replicas: tuple[Chunk, ...] = ()
    """Further copies of chunks, each saved by another rank (per-rank metadata of a replicated tensor)."""

    @property
    def stored_chunks(self) -> tuple[Chunk, ...]:
        """Every chunk with a slice in the files, replicas included."""
        return self.chunks + self.replicas


@dataclass(frozen=True)
class BytesItem:
    """A non-tensor value, saved with torch.save into its own slice."""

    fqn: str
    path: tuple[str | int, ...]
    location: SliceLocation | None


@dataclass(frozen=True)
class DcpMetadata:
    version: str | None
    tensors: tuple[TensorItem, ...]
    byte_items: tuple[BytesItem, ...]
    save_id: str | None


def parse_metadata(root: Any, source: Path) -> DcpMetadata:
    """Check and convert the unpickled `Metadata`; `CorruptCheckpointError` naming `source` and the
    first value that is not what DCP writes."""
    fields = _state(root, "Metadata", source, "the pickle")
    version = fields.get("version")
    if version is not None and not isinstance(version, str):
        raise _malformed(source, "version", version)
    if version not in KNOWN_VERSIONS:
        return DcpMetadata(version, (), (), None)
    items = _mapping(fields.get("state_dict_metadata"), source, "state_dict_metadata")
    planner = _mapping(fields.get("planner_data") or {}, source, "planner_data")
    storage = _storage_index(fields.get("storage_data") or {}, source)
    tensors, byte_items = [], []
    for fqn, item in items.items():
        if not isinstance(fqn, str):
            raise _malformed(source, "a state_dict_metadata key", fqn)
        path = _planner_path(planner.get(fqn, (fqn,)), source, fqn)
        if _is_stub(item, "BytesStorageMetadata"):
            byte_items.append(BytesItem(fqn, path, storage.get((fqn, None))))
        else:
            tensors.append(_tensor(fqn, path, item, storage, source))
    return DcpMetadata(version, tuple(tensors), tuple(byte_items), _save_id(fields.get("storage_meta")))


def _is_stub(value: Any, name: str) -> bool:
    return isinstance(value, Stub) and (type(value).module, type(value).name) in _STUBBED and type(value).name == name


def _state(value: Any, name: str, source: Path, where: str) -> dict[str, Any]:
    """The fields a dataclass stub received through BUILD (a dict of its `__dict__`)."""
    if not _is_stub(value, name) or not isinstance(value.state, dict):
        raise CorruptCheckpointError(f"{source}: {where} is {_describe(value)}, not a DCP {name}")
    return value.state


def _describe(value: Any) -> str:
    if isinstance(value, Stub):
        return f"a {value.qualname}"
    return f"a {type(value).__name__}"


def _malformed(source: Path, where: str, value: Any) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"{source}: {where} is {str(value)[:80]!r}, which DCP does not write")


def _mapping(value: Any, source: Path, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise CorruptCheckpointError(f"{source}: {where} is {_describe(value)}, not a mapping")
    return value


def _ints(value: Any, source: Path, where: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise _malformed(source, where, value)
    return value


def _planner_path(value: Any, source: Path, fqn: str) -> tuple[str | int, ...]:
    if not isinstance(value, tuple) or not value or not all(isinstance(part, (str, int)) for part in value):
        raise _malformed(source, f"planner_data[{fqn!r}]", value)
    return value


def _storage_index(value: Any, source: Path) -> dict[tuple[str, tuple[int, ...] | None], SliceLocation]:
    index = {}
    for key, info in _mapping(value, source, "storage_data").items():
        fields = _state(key, "MetadataIndex", source, "a storage_data key")
        fqn, offset = fields.get("fqn"), fields.get("offset")
        if not isinstance(fqn, str):
            raise _malformed(source, "a MetadataIndex fqn", fqn)
        where = f"storage_data[{fqn!r}]"
        offsets = None if offset is None else _ints(offset, source, f"{where} offset")
        index[(fqn, offsets)] = _location(_state(info, "_StorageInfo", source, where), source, where)
    return index


def _location(fields: dict[str, Any], source: Path, where: str) -> SliceLocation:
    file, offset, length = fields.get("relative_path"), fields.get("offset"), fields.get("length")
    transforms = fields.get("transform_descriptors") or ()
    if not isinstance(file, str) or not file or "/" in file or "\\" in file or file in {".", ".."}:
        raise _malformed(source, f"{where} relative_path", file)
    if type(offset) is not int or type(length) is not int or offset < 0 or length < 0:
        raise _malformed(source, f"{where} offset/length", (offset, length))
    if not isinstance(transforms, (list, tuple)) or not all(isinstance(t, str) for t in transforms):
        raise _malformed(source, f"{where} transform_descriptors", transforms)
    return SliceLocation(file, offset, length, tuple(transforms))


def _tensor(fqn: str, path: tuple[str | int, ...], item: Any, storage: dict[Any, SliceLocation], source: Path) -> TensorItem:
    where = f"state_dict_metadata[{fqn!r}]"
    fields = _state(item, "TensorStorageMetadata", source, where)
    shape = _ints(fields.get("size"), source, f"{where} size")
    chunks_in = fields.get("chunks")
    if not isinstance(chunks_in, list):
        raise _malformed(source, f"{where} chunks", chunks_in)
    chunks = []
    for chunk in chunks_in:
        chunk_fields = _state(chunk, "ChunkStorageMetadata", source, f"a chunk of {fqn!r}")
        offsets = _ints(chunk_fields.get("offsets"), source, f"a chunk offset of {fqn!r}")
        sizes = _ints(chunk_fields.get("sizes"), source, f"a chunk size of {fqn!r}")
        if len(offsets) != len(shape) or len(sizes) != len(shape):
            raise _malformed(source, f"a chunk of {fqn!r} (rank differs from the tensor's {len(shape)})", (offsets, sizes))
        chunks.append(Chunk(offsets, sizes, storage.get((fqn, offsets))))
    return TensorItem(fqn, path, _dtype(fields.get("properties"), source, where), shape, tuple(chunks))


def _dtype(properties: Any, source: Path, where: str) -> str:
    if not _is_stub(properties, "TensorProperties"):
        raise CorruptCheckpointError(f"{source}: {where} properties is {_describe(properties)}, not TensorProperties")
    state = properties.state
    # torch ≥ 2.3 pickles (dtype, layout, requires_grad, memory_format, pin_memory); older ones a dict.
    dtype = state[0] if isinstance(state, tuple) and len(state) == 5 else state.get("dtype") if isinstance(state, dict) else None
    if not isinstance(dtype, _DType):
        raise _malformed(source, f"{where} dtype", dtype)
    return dtype.name


def _save_id(storage_meta: Any) -> str | None:
    if _is_stub(storage_meta, "StorageMeta") and isinstance(storage_meta.state, dict):
        save_id = storage_meta.state.get("save_id")
        return save_id if isinstance(save_id, str) else None
    return None
