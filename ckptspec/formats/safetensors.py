"""Read `.safetensors` files, single or sharded by a `model.safetensors.index.json`, without the library.

    with open_safetensors("model.safetensors.index.json") as checkpoint:
        for pointer, tensor in checkpoint.tensors():      # "/lm_head.weight", TensorRef
            print(pointer, tensor.dtype, tensor.shape, tensor.byte_range, hex(tensor.crc32c()))

A file is an 8-byte little-endian header length, a JSON header, then the tensor bytes. The header is
checked as strictly as the safetensors library checks it, and more where the library is lenient about
what it cannot mean: the header may not exceed 100 MB, every tensor names a known dtype, a shape of
non-negative integers and `[begin, end)` offsets; sorted by offset, the tensors cover the data area
exactly, with no gap, no overlap and nothing past the end; a name appears once (a JSON object with a
repeated key is refused, not read last-one-wins); `__metadata__` maps strings to strings. Tensors are
`torchzip.TensorRef`s with torch's dtype names, so trees, pointers and manifests work as for torch files.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Collection, Iterator
from dataclasses import field
from pathlib import Path, PurePosixPath
from typing import Any

from .._dataclass import dataclass
from .._storage import location
from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from ._reader import TensorReader
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._io import read_bytes
from ._mapped import MappedFile, OpenFiles
from ._zip_records import ArchiveRecord
from ._names import SAFETENSORS_INDEX_SUFFIX
from ._tree import iter_tensors, resolve_pointer
from ._tensors import DTYPE_ITEMSIZE, RecordProblem, StorageRef, TensorRef

__all__ = [
    "MAX_HEADER_SIZE",
    "SafetensorsCheckpoint",
    "inspect_safetensors",
    "looks_like_safetensors",
    "open_safetensors",
    "strict_json",
]

MAX_HEADER_SIZE = 100_000_000
"""The safetensors library refuses larger headers; so does ckptspec."""
_MAX_INDEX_SIZE = 64 << 20
_LENGTH = struct.Struct("<Q")
_METADATA_KEY = "__metadata__"
_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
    "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64", "F64": "float64",
    "I64": "int64", "U64": "uint64",
}  # fmt: skip
"""safetensors dtype → torch's name for it (the name every ckptspec reader and manifest uses)."""
_SUB_BYTE_DTYPES = frozenset({"F4", "F6_E2M3", "F6_E3M2"})


def looks_like_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of `size` bytes starting with `head` (at least 9 bytes) is laid out as safetensors."""
    if len(head) < _LENGTH.size + 1 or head[_LENGTH.size : _LENGTH.size + 1] != b"{":
        return False
    (length,) = _LENGTH.unpack_from(head)
    return 0 < length <= min(MAX_HEADER_SIZE, size - _LENGTH.size)


@dataclass
class SafetensorsCheckpoint(TensorReader):
    """One safetensors file, or the shards an index names: every tensor by name, and the metadata.

    Close it (or use `with`) when done; `TensorRef`s read their bytes through it while it is open.
    """

    path: Path
    """The `.safetensors` file, or the index file of a sharded checkpoint."""
    files: list[Path]
    tree: dict[str, TensorRef]
    """Tensor name → tensor, shard by shard in file order."""
    metadata: dict[str, Any]
    """`__metadata__` of a single file; for a sharded one, the index's `metadata` and each shard's."""
    globals: list[GlobalRef] = field(default_factory=list)
    """Always empty: safetensors holds no pickle and names no code."""
    _mapped: list[MappedFile] = field(default_factory=list, repr=False)

    def close(self) -> None:
        for mapped in self._mapped:
            mapped.close()

    def tensors(self) -> Iterator[tuple[str, TensorRef]]:
        return iter_tensors(self.tree)

    def resolve(self, pointer: str) -> Any:
        return resolve_pointer(self.tree, pointer)

    def verify(self, trusted: Collection[str] = ()) -> list[RecordProblem]:
        """Nothing to verify: safetensors stores no checksums (a manifest's CRC32Cs are the check)."""
        return []


def open_safetensors(path: str | Path) -> SafetensorsCheckpoint:
    """Open a `.safetensors` file or a `*.safetensors.index.json` and check every header.

    Raises:
        CorruptCheckpointError: a header that breaks the format (naming the file and the tensor), an
            index naming a missing shard, a tensor in no shard or in two.
        UnsupportedFormatError: tensors of sub-byte dtypes (F4, F6), which are not read yet.
    """
    path = location(path)
    if path.name.endswith(SAFETENSORS_INDEX_SUFFIX):
        return _open_sharded(path)
    tensors, metadata, mapped = _open_file(path)
    return SafetensorsCheckpoint(path, [path], tensors, metadata, _mapped=[mapped])


def _open_file(path: Path, shared: OpenFiles | None = None) -> tuple[dict[str, TensorRef], dict[str, str], MappedFile]:
    mapped = MappedFile(path, "tensors", shared=shared)
    try:
        header, data_start = _header(mapped)
        metadata = _metadata(path, header.pop(_METADATA_KEY, {}))
        return _lay_out(mapped, header, data_start), metadata, mapped
    except BaseException:
        mapped.close()
        raise


def _header(mapped: MappedFile) -> tuple[dict[str, Any], int]:
    """The header object, and the offset where the data area after it starts."""
    path, size = mapped.path, mapped.size
    if size < _LENGTH.size:
        raise CorruptCheckpointError(f"{path}: {size} bytes, too short for the 8-byte header length of a safetensors file")
    (length,) = _LENGTH.unpack(mapped.read(0, _LENGTH.size))
    if length > MAX_HEADER_SIZE:
        raise CorruptCheckpointError(f"{path}: header length {length} exceeds the {MAX_HEADER_SIZE}-byte limit of safetensors")
    if _LENGTH.size + length > size:
        raise CorruptCheckpointError(f"{path}: header length {length} runs past the end of the file ({size} bytes); the file is truncated")
    text = _decode(path, mapped.read(_LENGTH.size, length))
    if not text.startswith("{"):
        raise CorruptCheckpointError(f"{path}: the header does not start with '{{'")
    header = strict_json(path, "header", text)
    if not isinstance(header, dict):
        raise CorruptCheckpointError(f"{path}: the header is JSON but not an object")
    return header, _LENGTH.size + length


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: the header is not UTF-8 (byte {exc.start})") from None


def strict_json(path: Path, what: str, text: str) -> Any:
    """JSON with repeated keys refused (two tensors of one name would otherwise be read last-one-wins)."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(path, what, pairs), parse_constant=_no_constant)
    except CorruptCheckpointError:
        raise
    except RecursionError:
        raise CorruptCheckpointError(f"{path}: the {what} nests too deeply to read") from None
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: the {what} is not valid JSON: {exc}") from None


def _unique_keys(path: Path, what: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise CorruptCheckpointError(f"{path}: the {what} names {key!r} twice")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _metadata(path: Path, metadata: Any) -> dict[str, str]:
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CorruptCheckpointError(f"{path}: {_METADATA_KEY} must map strings to strings")
    return metadata


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _lay_out(mapped: MappedFile, header: dict[str, Any], data_start: int) -> dict[str, TensorRef]:
    """Check that the tensors tile the data area exactly, then locate each one in the file."""
    path = mapped.path
    entries = sorted((_entry(path, name, info) for name, info in header.items()), key=lambda e: (e.begin, e.end))
    cursor = 0
    for entry in entries:
        if entry.begin != cursor:
            problem = "overlaps the tensor before it" if entry.begin < cursor else f"leaves a gap of {entry.begin - cursor} bytes before it"
            raise CorruptCheckpointError(f"{path}: tensor {entry.name}: data_offsets [{entry.begin}, {entry.end}] {problem}")
        cursor = entry.end
    data_size = mapped.size - data_start
    if cursor != data_size:
        raise CorruptCheckpointError(
            f"{path}: the tensors cover {cursor} bytes of data but the file holds {data_size} after the header"
            + ("; the file is truncated" if cursor > data_size else "")
        )
    tensors = {}
    for entry in entries:
        record = ArchiveRecord(entry.name, data_start + entry.begin, entry.end - entry.begin)
        storage = StorageRef(entry.name, entry.dtype, math.prod(entry.shape), "", record, mapped)
        tensors[entry.name] = TensorRef(entry.dtype, entry.shape, _row_major_strides(entry.shape), storage, 0)
    return tensors


def _entry(path: Path, name: str, info: Any) -> _Entry:
    where = f"{path}: tensor {name}"
    if not isinstance(info, dict):
        raise CorruptCheckpointError(f"{where}: {type(info).__name__}, not an object with dtype, shape and data_offsets")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype in _SUB_BYTE_DTYPES:
        raise UnsupportedFormatError(f"{where}: sub-byte dtype {dtype} is not read yet")
    if dtype not in _DTYPES:
        raise CorruptCheckpointError(f"{where}: unknown dtype {_short(dtype)}")
    if not _naturals(shape):
        raise CorruptCheckpointError(f"{where}: shape {_short(shape)} is not a list of non-negative integers")
    if not (_naturals(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1]):
        raise CorruptCheckpointError(f"{where}: data_offsets {_short(offsets)} are not [begin, end] with begin <= end")
    expected = _numel(shape, offsets[1] - offsets[0]) * DTYPE_ITEMSIZE[_DTYPES[dtype]]
    if offsets[1] - offsets[0] != expected:
        raise CorruptCheckpointError(
            f"{where}: data_offsets [{offsets[0]}, {offsets[1]}] span {offsets[1] - offsets[0]} bytes, not what a "
            f"{dtype} tensor of shape {_short(shape)} takes"
        )
    return _Entry(name, _DTYPES[dtype], tuple(shape), offsets[0], offsets[1])


def _numel(shape: list[int], limit: int) -> int:
    """The element count, or `limit + 1` once it is known to exceed `limit`: a hostile header's
    thousand-digit dimensions are never multiplied out."""
    if 0 in shape:
        return 0
    count = 1
    for size in shape:
        count *= size
        if count > limit:
            return limit + 1
    return count


def _naturals(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int and v >= 0 for v in values)


def _short(value: Any) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 80 else text[:77] + "..."


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


# --- sharded checkpoints ---------------------------------------------------------------------------


def _open_sharded(index: Path) -> SafetensorsCheckpoint:
    document = _index_document(index)
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CorruptCheckpointError(f"{index}: weight_map must map tensor names to shard file names")
    checkpoint = SafetensorsCheckpoint(index, [index], {}, {"index": document.get("metadata", {})})
    shared = OpenFiles()
    try:
        for shard_name in dict.fromkeys(weight_map.values()):
            _add_shard(checkpoint, index, shard_name, weight_map, shared)
        unlisted = [name for name in weight_map if name not in checkpoint.tree]
        if unlisted:
            raise CorruptCheckpointError(f"{index}: tensor {unlisted[0]} is mapped to shard {weight_map[unlisted[0]]}, which does not hold it")
    except BaseException:
        checkpoint.close()
        raise
    return checkpoint


def _index_document(index: Path) -> dict[str, Any]:
    data = read_bytes(index, _MAX_INDEX_SIZE)
    document = strict_json(index, "index", _decode(index, data))
    if not isinstance(document, dict):
        raise CorruptCheckpointError(f"{index}: the index is JSON but not an object")
    return document


def _add_shard(
    checkpoint: SafetensorsCheckpoint, index: Path, shard_name: str, weight_map: dict[str, str], shared: OpenFiles
) -> None:
    relative = PurePosixPath(shard_name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise CorruptCheckpointError(f"{index}: shard {shard_name!r} is not a file name beside the index")
    shard = index.parent.joinpath(*relative.parts)
    if not shard.is_file():
        held = sum(1 for name in weight_map.values() if name == shard_name)
        raise CorruptCheckpointError(f"{index}: shard {shard_name} is missing (the index maps {held} tensors to it)")
    tensors, metadata, mapped = _open_file(shard, shared)
    checkpoint._mapped.append(mapped)
    checkpoint.files.append(shard)
    checkpoint.metadata[shard_name] = metadata
    for name, tensor in tensors.items():
        if weight_map.get(name) != shard_name:
            mapped_to = f"maps it to shard {weight_map[name]}" if name in weight_map else "does not list it"
            raise CorruptCheckpointError(f"{shard}: holds tensor {name}, but the index {mapped_to}; each tensor must be in exactly one shard")
        checkpoint.tree[name] = tensor


# --- inspection ------------------------------------------------------------------------------------


def inspect_safetensors(path: str | Path) -> Inspection:
    """Summarise a safetensors checkpoint: every tensor as the model's, `__metadata__` shown."""
    with open_safetensors(path) as checkpoint:
        return Inspection(
            path=str(checkpoint.path),
            format="safetensors",
            files=[FileSummary(str(file), file.stat().st_size) for file in checkpoint.files],
            tensors=[TensorSummary(p, t.dtype, t.shape, t.nbytes, "model") for p, t in checkpoint.tensors()],
            metadata=checkpoint.metadata,
            components={"model": ""},
        )
