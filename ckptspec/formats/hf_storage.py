"""torch.distributed.checkpoint's Hugging Face storage layout, read and checked without torch.

`dcp.save(state, storage_writer=HuggingFaceStorageWriter(path, save_distributed=True))` has every
rank write its chunks as safetensors files named `shard-{rank + 1}-model-{K}-of-{N}.safetensors`
(five digits each). A file's `__metadata__` holds `DCP_SHARDING_INFO`, a JSON object giving each
tensor chunk's `saved_offsets` in the global tensor, and `DCP_VERSION`. No other file is written:
the global shape is the end of the furthest chunk, and there is no commit record, so a rank whose
file is gone altogether can only be told by a gap in a tensor it shared, or against a manifest.
(With `enable_consolidation` the shards go to `sharded/` and a plain safetensors checkpoint with
`model.safetensors.index.json` is written beside it; the rank-0 form is that plain layout only.)

Every file goes through the safetensors reader; the chunks then read as a DCP directory's do (see
`dcp.DcpDirectory`): the same tiling and missing-file checks, the same per-tensor CRC32C.
"""

from __future__ import annotations

import json
import math
import struct
from collections import OrderedDict
from collections.abc import Collection, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from .._pointer import join_pointer
from ._dcp_metadata import BytesItem, Chunk, SliceLocation, TensorItem
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._io import unreadable
from ._dcp_tiling import tiling_problems
from .dcp import ShardProblem
from ._names import HF_STORAGE_SHARD
from .safetensors import MAX_HEADER_SIZE, SafetensorsCheckpoint, open_safetensors, strict_json
from ._tensors import DTYPE_ITEMSIZE

__all__ = ["HfStorageDirectory", "inspect_hf_storage", "open_hf_storage"]

_KNOWN_VERSIONS = frozenset({None, "1.0"})
"""`DCP_VERSION` values whose `DCP_SHARDING_INFO` this reader knows (None: a file without it)."""
_SHARDING_KEY = "DCP_SHARDING_INFO"
_VERSION_KEY = "DCP_VERSION"
_OFFSETS_KEY = "saved_offsets"
_LENGTH = struct.Struct("<Q")
_REPORTED = 3
_OPEN_FILES = 64
"""Shard files kept open at once: a save of thousands of ranks must not exhaust file descriptors."""


@dataclass
class HfStorageDirectory:
    """The shard files of one save, their chunks gathered per tensor. Close it when done: the
    tensors' CRC32Cs read through the files it keeps mapped."""

    path: Path
    data_files: dict[str, int]
    """Name → size of every shard file present."""
    tensors: tuple[TensorItem, ...] = ()
    problems: list[ShardProblem] = field(default_factory=list)
    _opened: OrderedDict[str, SafetensorsCheckpoint] = field(default_factory=OrderedDict, repr=False)
    """The shard files last read, at most `_OPEN_FILES`, oldest first."""

    byte_items: tuple[BytesItem, ...] = ()
    """Always empty: the layout stores tensors only."""
    item_globals: dict[str, list[GlobalRef]] = field(default_factory=dict)
    """Always empty: the layout stores no pickled values."""
    globals: list[GlobalRef] = field(default_factory=list)
    """Always empty: safetensors holds no pickle and names no code."""

    @property
    def metadata_files(self) -> list[Path]:
        """The files whose headers hold the save's metadata: all of them."""
        return self.files

    @property
    def files(self) -> list[Path]:
        return [self.path / name for name in self.data_files]

    @property
    def ranks(self) -> list[int]:
        return sorted({_rank_of(name) for name in self.data_files})

    def close(self) -> None:
        for checkpoint in self._opened.values():
            checkpoint.close()
        self._opened.clear()

    def where(self, location: SliceLocation) -> str:
        """`rank R file NAME bytes A..B`, how messages name a chunk."""
        return f"rank {_rank_of(location.file)} file {location.file} bytes {location.offset}..{location.offset + location.length}"

    def tensor_crc32c(self, tensor: TensorItem) -> int:
        """CRC32C of the tensor's chunks' bytes, chunk after chunk in order of their offsets, as
        `DcpDirectory.tensor_crc32c` counts it."""
        value = 0
        for chunk in sorted(tensor.chunks, key=lambda chunk: chunk.offsets):
            location = chunk.location
            assert location is not None  # every chunk here was found in a file
            ref = self._shard(location.file).tree.get(tensor.fqn)
            if ref is None or ref.byte_range != (location.offset, location.offset + location.length):
                raise CorruptCheckpointError(f"{self.path / location.file}: {tensor.fqn}: the file changed while it was read")
            value = ref.crc32c(value)
        return value

    def _shard(self, name: str) -> SafetensorsCheckpoint:
        """The shard file `name`, opened again when it was closed to keep others open."""
        checkpoint = self._opened.get(name)
        if checkpoint is None:
            checkpoint = open_safetensors(self.path / name)
            self._keep(name, checkpoint)
        self._opened.move_to_end(name)
        return checkpoint

    def _keep(self, name: str, checkpoint: SafetensorsCheckpoint) -> None:
        self._opened[name] = checkpoint
        while len(self._opened) > _OPEN_FILES:
            self._opened.popitem(last=False)[1].close()

    def verify(self, trusted: Collection[str] = ()) -> list[ShardProblem]:
        """Nothing left to read: safetensors stores no checksum, and every header was checked on opening."""
        return []

    def damaged_chunks(self, tensor: TensorItem) -> list[ShardProblem]:
        """None can be told: safetensors stores no checksum of a chunk's bytes."""
        return []

    def read_value(self, item: BytesItem) -> Any:
        raise CorruptCheckpointError(f"{self.path}: {item.fqn}: the Hugging Face layout stores no values")

    def item_file(self, item: BytesItem) -> Path:
        return self.path / item.fqn


def _rank_of(name: str) -> int:
    match = HF_STORAGE_SHARD.match(name)
    assert match is not None  # only shard files are kept
    return int(match.group(1)) - 1


@dataclass
class _Gathered:
    dtype: str
    ndim: int
    chunks: list[Chunk]


def open_hf_storage(path: Path) -> HfStorageDirectory:
    """Read every shard file's header and check how the chunks cover each tensor. Damage is listed
    in `problems`; `ReaderError` when the directory cannot be listed or a file cannot be read."""
    shards, unreadable_names, strays = _listing(path)
    directory = HfStorageDirectory(path, shards)
    for name in unreadable_names:
        message = f"rank {_rank_of(name)} file {name}: not a regular file, so its chunks cannot be read"
        directory.problems.append(ShardProblem("slice-missing", path / name, message))
    for name in strays:
        message = f"{name} is not named like a shard of this save (shard-R-model-K-of-N.safetensors): a file of another save, not read"
        directory.problems.append(ShardProblem("unreferenced-shard", path / name, message))
    gathered: dict[str, _Gathered] = {}
    try:
        for name in directory.data_files:
            directory.problems.extend(_add_file(directory, name, gathered))
    except BaseException:
        directory.close()
        raise
    directory.tensors = tuple(_tensor(fqn, found) for fqn, found in gathered.items())
    for tensor in directory.tensors:
        first = directory.path / tensor.chunks[0].location.file  # type: ignore[union-attr]
        for message in tiling_problems(tensor):
            directory.problems.append(ShardProblem("tensor-not-tiled", first, f"{tensor.fqn}: {message}", tensor.fqn))
    return directory


def _listing(path: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """Name → size of the shard files, ordered by rank then file number; the names of shards that
    are not regular files (a FIFO or a dangling link is never opened); and other safetensors files."""
    try:
        names = sorted(child.name for child in path.iterdir())
        shards = sorted((numbers, name) for name in names if (numbers := _shard_numbers(name)) is not None)
        regular = {name: (path / name).stat().st_size for _, name in shards if (path / name).is_file()}
    except OSError as exc:
        raise unreadable(exc.filename or path, exc) from None
    strays = [name for name in names if name.endswith(".safetensors") and _shard_numbers(name) is None]
    return regular, [name for _, name in shards if name not in regular], strays


def _shard_numbers(name: str) -> tuple[int, int, int] | None:
    """(rank + 1, K, N) of a shard file's name; None for a name DCP does not write (rank 0 is
    `shard-00001`, files count from 1 and K is at most N)."""
    match = HF_STORAGE_SHARD.match(name)
    if match is None:
        return None
    rank, number, count = map(int, match.groups())
    return (rank, number, count) if rank >= 1 and 1 <= number <= count else None


def _add_file(directory: HfStorageDirectory, name: str, gathered: dict[str, _Gathered]) -> Iterator[ShardProblem]:
    file = directory.path / name
    try:
        checkpoint = open_safetensors(file)
    except CorruptCheckpointError as exc:
        yield _unreadable_shard(directory, name, exc)
        return
    except UnsupportedFormatError as exc:
        detail = str(exc).removeprefix(f"{file}: ")
        yield ShardProblem("slice-transformed", file, f"rank {_rank_of(name)} file {name}: {detail}; its chunks were not checked")
        return
    directory._keep(name, checkpoint)
    try:
        offsets = _saved_offsets(file, checkpoint)
    except CorruptCheckpointError as exc:
        yield ShardProblem("metadata-malformed", file, str(exc).removeprefix(f"{file}: "))
        return
    if offsets is None:
        version = checkpoint.metadata.get(_VERSION_KEY)
        message = f"DCP_VERSION {version} is not one this reader knows (1.0 or none): its chunks were not checked"
        yield ShardProblem("metadata-version-unknown", file, message)
        return
    for fqn, tensor in checkpoint.tree.items():
        start, end = tensor.byte_range
        location = SliceLocation(name, start, end - start)
        known = gathered.setdefault(fqn, _Gathered(tensor.dtype, len(tensor.shape), []))
        if (known.dtype, known.ndim) != (tensor.dtype, len(tensor.shape)):
            message = (
                f"{fqn}: {directory.where(location)}: holds a {len(tensor.shape)}-d {tensor.dtype} chunk, "
                f"another shard a {known.ndim}-d {known.dtype} one"
            )
            yield ShardProblem("slice-corrupt", file, message, fqn)
            continue
        known.chunks.append(Chunk(offsets[fqn], tensor.shape, location))


def _saved_offsets(file: Path, checkpoint: SafetensorsCheckpoint) -> dict[str, tuple[int, ...]] | None:
    """Each tensor's chunk offsets from `DCP_SHARDING_INFO` (all zero when the file has none); None
    for an unknown `DCP_VERSION`. `CorruptCheckpointError` when the record is not what DCP writes."""
    metadata = checkpoint.metadata
    if metadata.get(_VERSION_KEY) not in _KNOWN_VERSIONS:
        return None
    if _SHARDING_KEY not in metadata:
        return {fqn: (0,) * len(tensor.shape) for fqn, tensor in checkpoint.tree.items()}
    info = strict_json(file, _SHARDING_KEY, metadata[_SHARDING_KEY])
    if not isinstance(info, dict):
        raise CorruptCheckpointError(f"{file}: {_SHARDING_KEY} is not a JSON object")
    found = {}
    for fqn, tensor in checkpoint.tree.items():
        entry = info.get(fqn)
        offsets = entry.get(_OFFSETS_KEY) if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == len(tensor.shape) and all(type(o) is int and o >= 0 for o in offsets)):
            raise CorruptCheckpointError(f"{file}: {_SHARDING_KEY} gives tensor {fqn} no saved_offsets of its rank ({len(tensor.shape)})")
        found[fqn] = tuple(offsets)
    return found


def _unreadable_shard(directory: HfStorageDirectory, name: str, error: CorruptCheckpointError) -> ShardProblem:
    """The problem for a shard file the safetensors reader refused: a truncated one is told apart,
    naming the tensors cut off, since its header is there and its bytes are not."""
    file = directory.path / name
    size = directory.data_files[name]
    where = f"rank {_rank_of(name)} file {name}"
    declared = _declared_ends(file)
    if declared is not None and max(declared.values(), default=0) > size:
        cut = [tensor for tensor, end in declared.items() if end > size]
        shown = ", ".join(cut[:_REPORTED]) + (f" and {len(cut) - _REPORTED} more" if len(cut) > _REPORTED else "")
        message = f"{where}: its header declares {max(declared.values())} bytes, the file has only {size} (truncated): {shown or 'the header'} cut off"
        return ShardProblem("slice-out-of-range", file, message)
    return ShardProblem("slice-corrupt", file, f"{where}: {str(error).removeprefix(f'{file}: ')}")


def _declared_ends(file: Path) -> dict[str, int] | None:
    """Where each tensor of a safetensors file ends by its header (the header itself under `""`),
    or None when the header cannot even be parsed. Used only on a file the reader already refused,
    to say why."""
    try:
        with file.open("rb") as handle:
            head = handle.read(_LENGTH.size)
            if len(head) < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack(head)
            if length > MAX_HEADER_SIZE:
                return None
            header = handle.read(length)
    except OSError as exc:
        raise unreadable(file, exc) from None
    data_start = _LENGTH.size + length
    if len(header) < length:
        return {"": data_start}
    try:
        entries = json.loads(header)
    except (ValueError, RecursionError):
        return None
    return {
        tensor: data_start + info["data_offsets"][1]
        for tensor, info in (entries.items() if isinstance(entries, dict) else ())
        if isinstance(info, dict) and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
        and type(info["data_offsets"][1]) is int
    }  # fmt: skip


def _tensor(fqn: str, found: _Gathered) -> TensorItem:
    """The tensor whose chunks `found` holds: its global shape reaches the end of its furthest chunk."""
    shape = tuple(max(chunk.offsets[d] + chunk.sizes[d] for chunk in found.chunks) for d in range(found.ndim))
    return TensorItem(fqn, (fqn,), found.dtype, shape, tuple(found.chunks))


def inspect_hf_storage(path: Path) -> Inspection:
    """Summarise a DCP save in the Hugging Face storage layout: ranks, shard files, every tensor with its chunk
    count. A directory with damage (see `open_hf_storage`) is a `CorruptCheckpointError` listing it."""
    directory = open_hf_storage(path)
    directory.close()
    if directory.problems:
        shown = "; ".join(problem.message for problem in directory.problems[:_REPORTED])
        more = f" (and {len(directory.problems) - _REPORTED} more)" if len(directory.problems) > _REPORTED else ""
        raise CorruptCheckpointError(f"{path}: {shown}{more}")
    tensors = [
        TensorSummary(join_pointer(t.path), t.dtype, t.shape, math.prod(t.shape) * DTYPE_ITEMSIZE[t.dtype], "model")
        for t in directory.tensors
    ]
    metadata: dict[str, Any] = {
        "layout": "dcp-huggingface",
        "ranks": directory.ranks,
        "shards": dict(directory.data_files),
        "chunks": {join_pointer(t.path): len(t.chunks) for t in directory.tensors},
    }
    return Inspection(
        path=str(path),
        format="dcp",
        files=[FileSummary(str(file), size) for file, size in zip(directory.files, directory.data_files.values())],
        tensors=tensors,
        metadata=metadata,
        components={"model": ""},
    )
