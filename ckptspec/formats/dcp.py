"""torch.distributed.checkpoint (DCP) directories, read and verified without torch.

A DCP save is a directory: `.metadata` (or one `__R.metadata` per rank when saved without
collectives) and data files `__R_I.distcp` written by rank R. The metadata names, for every tensor,
its global shape and dtype and every chunk (offsets and sizes in the global tensor) with the byte
range of the file holding it; each range is a complete torch.save archive, read here with the same
zip reader as a `.pt` file. Lightning's sharded strategies add `meta.pt`, the rest of the checkpoint.

DCP stores no checksum of its own: structure is checked here (chunks tile each tensor, every range
lies inside an existing file, the save was committed), bytes against each slice's zip CRC-32s and,
through a manifest, the CRC32C of each tensor's chunks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._exceptions import CkptspecError, CorruptCheckpointError
from .._pointer import join_pointer
from ._dcp_metadata import (
    KNOWN_VERSIONS,
    BytesItem,
    Chunk,
    DcpMetadata,
    SliceLocation,
    TensorItem,
    parse_metadata,
    unpickle_metadata,
)
from .._crc32c import crc32c_combine
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._io import read_bytes, unreadable
from ._pickle_safety import PickleReadStopped
from ._names import DCP_DATA_FILE, DCP_METADATA, DCP_PENDING_METADATA, DCP_RANK_METADATA, LIGHTNING_META, ZIP_MAGIC
from .torchzip import TorchCheckpoint
from ._tree import plain_components
from ._tensors import DTYPE_ITEMSIZE, TensorRef
from ._dcp_tiling import tiling_problems

__all__ = [
    "SHARDED_SAVE_KEY",
    "ChunkKey",
    "DcpDirectory",
    "KnownSave",
    "ShardProblem",
    "combined_crc32c",
    "inspect_dcp_directory",
    "open_dcp_directory",
    "rank_key",
]

SHARDED_SAVE_KEY = "ckptspec"
"""Top-level key of what `ckptspec.torch.save_sharded` adds to the saved state: `world_size`, and
`rng/rank<R>` per rank."""


def rank_key(rank: int) -> str:
    """The key of one rank's generator states under `SHARDED_SAVE_KEY`'s `rng`."""
    return f"rank{rank}"

ChunkKey = tuple[str, tuple[int, ...]]
"""A chunk of a tensor: the tensor's fqn and the chunk's offsets in it."""
_REPORTED = 3


@dataclass(frozen=True)
class ShardProblem:
    """Something wrong with the directory, in the words of the rule that reports it."""

    kind: str
    """`uncommitted-save`, `metadata-malformed`, `metadata-version-unknown`, `tensor-not-tiled`,
    `slice-missing`, `slice-out-of-range`, `slice-corrupt`, `slice-transformed`, `unreferenced-shard`,
    `checksum-mismatch`."""
    file: Path
    message: str
    fqn: str | None = None


@dataclass(frozen=True)
class KnownSave:
    """What the ranks that wrote a DCP save hold of it, used instead of reading it back."""

    metadata: DcpMetadata | None = None
    """The metadata as the save committed it, in the form `.metadata` reads as."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """DCP key → the value of a non-tensor item, as the rank that wrote it passed it on."""


@dataclass
class DcpDirectory:
    path: Path
    metadata_files: list[Path]
    data_files: dict[str, int]
    """Name → size of every `__R_I.distcp` file present."""
    metadata: DcpMetadata | None
    """None when no metadata could be read; `problems` says why."""
    globals: list[GlobalRef] = field(default_factory=list)
    problems: list[ShardProblem] = field(default_factory=list)
    lightning_meta: Path | None = None
    item_globals: dict[str, list[GlobalRef]] = field(default_factory=dict)
    """DCP key → the globals the pickle of each non-tensor item read so far names (`read_value`)."""

    @property
    def tensors(self) -> tuple[TensorItem, ...]:
        return self.metadata.tensors if self.metadata is not None else ()

    @property
    def byte_items(self) -> tuple[BytesItem, ...]:
        return self.metadata.byte_items if self.metadata is not None else ()

    @property
    def ranks(self) -> list[int]:
        """The ranks that wrote data files."""
        return sorted({rank for name in self.data_files if (rank := _rank_of(name)) is not None})

    @property
    def files(self) -> list[Path]:
        extra = [self.lightning_meta] if self.lightning_meta is not None else []
        return [*self.metadata_files, *(self.path / name for name in sorted(self.data_files)), *extra]

    def rank_files(self, rank: int) -> list[Path]:
        """The data files rank `rank` wrote."""
        return [self.path / name for name in sorted(self.data_files) if _rank_of(name) == rank]

    def where(self, location: SliceLocation) -> str:
        """`rank R file NAME bytes A..B`, how messages name a slice."""
        rank = _rank_of(location.file)
        named = f"rank {rank} " if rank is not None else ""
        return f"{named}file {location.file} bytes {location.offset}..{location.offset + location.length}"

    def readable(self, location: SliceLocation | None) -> bool:
        """Whether the slice's range lies inside a file that is there (the structural checks report the rest)."""
        return (
            location is not None
            and not location.transforms
            and location.offset + location.length <= self.data_files.get(location.file, -1)
        )

    def tensor_crc32c(self, tensor: TensorItem) -> int:
        """CRC32C of the tensor's chunks' bytes, chunk after chunk in order of their offsets: for a
        tensor split along its first dimension, or not split, the CRC32C of the whole tensor."""
        value = 0
        for chunk in sorted(tensor.chunks, key=lambda chunk: chunk.offsets):
            if not self.readable(chunk.location):
                raise CorruptCheckpointError(f"{self.path}: {tensor.fqn}: chunk at {list(chunk.offsets)} cannot be read")
            with self._slice(chunk.location) as archive:  # type: ignore[arg-type]
                value = _slice_tensor(archive, tensor.fqn).crc32c(value)
        return value

    def read_value(self, item: BytesItem) -> Any:
        """The value a non-tensor item holds, read with the restricted unpickler; the globals its
        pickle names (up to where it stops, if it does) are kept in `item_globals`. `dcp.load`
        unpickles every such item with torch.load, so each is as dangerous as a pickle file."""
        if not self.readable(item.location):
            raise CorruptCheckpointError(f"{self.path}: {item.fqn}: its slice cannot be read")
        try:
            with self._slice(item.location) as archive:  # type: ignore[arg-type]
                self.item_globals[item.fqn] = list(archive.globals)
                return archive.tree
        except PickleReadStopped as stopped:
            self.item_globals[item.fqn] = list(stopped.globals)
            raise

    def item_file(self, item: BytesItem) -> Path:
        """How findings name a non-tensor item: `DIR/__0_0.distcp!optim.param_groups.0.lr`."""
        stored = item.location.file if item.location is not None else DCP_METADATA
        return self.path / f"{stored}!{item.fqn}"

    def damaged_chunks(self, tensor: TensorItem) -> list[ShardProblem]:
        """The problems of the tensor's chunks whose slices fail their own checks, the records'
        CRC-32s included, each slice read again: where the bytes of a tensor whose CRC32C did not
        match its manifest's were changed."""
        return [problem for chunk in tensor.stored_chunks for problem in self._verify_chunk(tensor, chunk, trusted=False)]

    def verify(self, trusted: Collection[str] = ()) -> list[ShardProblem]:
        """Read every slice: it must be a torch.save archive whose records match their CRC-32s, and
        each tensor chunk's dtype and shape must be what the metadata says. Chunks of tensors in
        `trusted` (by fqn) have their tensor bytes checked by the caller against a manifest instead."""
        problems = []
        for tensor in self.tensors:
            for chunk in tensor.stored_chunks:
                problems.extend(self._verify_chunk(tensor, chunk, tensor.fqn in trusted))
        for item in self.byte_items:
            problems.extend(self._verify_slice(item.fqn, item.location, lambda archive: None))
        return problems

    def _verify_chunk(self, tensor: TensorItem, chunk: Chunk, trusted: bool) -> list[ShardProblem]:
        def check(archive: TorchCheckpoint) -> str | None:
            ref = _slice_tensor(archive, tensor.fqn)
            if ref.dtype != tensor.dtype or ref.shape != chunk.sizes:
                return f"holds a {ref.dtype} tensor of shape {list(ref.shape)}, the metadata says {tensor.dtype} {list(chunk.sizes)}"
            return None

        location = chunk.location
        if location is not None and self._holds_raw_bytes(tensor, chunk, location):
            message = (
                f"{tensor.fqn}: {self.where(location)}: raw tensor bytes (DCP's safetensors serialization), "
                "which this reader does not check"
            )
            return [ShardProblem("slice-transformed", self.path / location.file, message, tensor.fqn)]
        return self._verify_slice(tensor.fqn, location, check, trusted)

    def _holds_raw_bytes(self, tensor: TensorItem, chunk: Chunk, location: SliceLocation) -> bool:
        """Whether the slice is the chunk's bytes as they are, not a torch.save archive."""
        raw_length = chunk.numel * DTYPE_ITEMSIZE.get(tensor.dtype, 0)
        return self.readable(location) and location.length == raw_length and not self._starts_archive(location)

    def _starts_archive(self, location: SliceLocation) -> bool:
        try:
            with (self.path / location.file).open("rb") as handle:
                handle.seek(location.offset)
                return handle.read(len(ZIP_MAGIC)) == ZIP_MAGIC
        except OSError as exc:
            raise unreadable(self.path / location.file, exc) from None

    def _verify_slice(
        self, fqn: str, location: SliceLocation | None, check: Callable[[TorchCheckpoint], str | None], trusted: bool = False
    ) -> list[ShardProblem]:
        if location is not None and location.transforms and location.file in self.data_files:
            transforms = ", ".join(location.transforms)
            message = f"{fqn}: {self.where(location)}: stored through {transforms}; its bytes were not checked"
            return [ShardProblem("slice-transformed", self.path / location.file, message, fqn)]
        if not self.readable(location):
            return []
        assert location is not None
        file = self.path / location.file
        try:
            with self._slice(location) as archive:
                mismatch = check(archive)
                damaged = archive.verify(("",) if trusted else ())
        except CkptspecError as exc:
            detail = str(exc).removeprefix(f"{file}: ")
            return [ShardProblem("slice-corrupt", file, f"{fqn}: {self.where(location)}: {detail}", fqn)]
        problems = [ShardProblem("slice-corrupt", file, f"{fqn}: {self.where(location)}: {mismatch}", fqn)] if mismatch else []
        problems += [
            ShardProblem("checksum-mismatch", file, f"{fqn}: {self.where(location)}: {damage.message}", fqn)
            for damage in damaged
        ]
        return problems

    def _slice(self, location: SliceLocation) -> TorchCheckpoint:
        try:
            return TorchCheckpoint(self.path / location.file, location.offset, location.offset + location.length)
        except OSError as exc:
            raise unreadable(self.path / location.file, exc) from None


def _rank_of(name: str) -> int | None:
    """The rank that wrote the data file `name`."""
    match = DCP_DATA_FILE.match(name)
    return int(match.group(1)) if match else None


def combined_crc32c(fqn: str, chunk_offsets: Iterable[tuple[int, ...]], chunks: Mapping[ChunkKey, tuple[int, int]]) -> int:
    """`DcpDirectory.tensor_crc32c` of the tensor `fqn` whose chunks start at `chunk_offsets`, from the
    chunks' own `(CRC32C, byte count)` without reading a byte; `KeyError` for a chunk not in `chunks`."""
    value = 0
    for offsets in sorted(chunk_offsets):
        crc, length = chunks[(fqn, offsets)]
        value = crc32c_combine(value, crc, length)
    return value


def _slice_tensor(archive: TorchCheckpoint, fqn: str) -> TensorRef:
    if not isinstance(archive.tree, TensorRef):
        raise CorruptCheckpointError(f"{archive.path}: the slice of {fqn} holds no tensor")
    return archive.tree


def open_dcp_directory(path: Path, committed: DcpMetadata | None = None) -> DcpDirectory:
    """Read a DCP directory's metadata and check its structure; `ReaderError` when it cannot be listed
    or a file of it cannot be read. Nothing here reads tensor bytes (see `DcpDirectory.verify`).
    `committed` is the metadata the caller committed itself: `.metadata` is then not read again."""
    names = _listing(path)
    directory = DcpDirectory(
        path=path,
        metadata_files=_metadata_files(path, names),
        data_files={name: size for name, size in sorted(names.items()) if DCP_DATA_FILE.match(name)},
        metadata=None,
        lightning_meta=path / LIGHTNING_META if LIGHTNING_META in names else None,
    )
    directory.problems.extend(_commit_problems(directory, names))
    directory.metadata = committed if committed is not None and directory.metadata_files else _read_metadata(directory)
    if directory.metadata is not None:
        directory.problems.extend(_structure_problems(directory))
    return directory


def _listing(path: Path) -> dict[str, int]:
    """Name → size of the directory's regular files (a special file named like a shard is then missing)."""
    try:
        return {child.name: child.stat().st_size for child in path.iterdir() if child.is_file()}
    except OSError as exc:
        raise unreadable(exc.filename or path, exc) from None


def _metadata_files(path: Path, names: Collection[str]) -> list[Path]:
    if DCP_METADATA in names:
        return [path / DCP_METADATA]
    per_rank = sorted((int(match.group(1)), name) for name in names if (match := DCP_RANK_METADATA.match(name)))
    return [path / name for _, name in per_rank]


def _commit_problems(directory: DcpDirectory, names: Collection[str]) -> Iterator[ShardProblem]:
    if DCP_PENDING_METADATA in names:
        yield ShardProblem(
            "uncommitted-save",
            directory.path / DCP_PENDING_METADATA,
            f"{DCP_PENDING_METADATA} is left over: a save into this directory did not finish, so its data files "
            "may come from two different saves",
        )
    if not directory.metadata_files:
        yield ShardProblem(
            "uncommitted-save",
            directory.path / DCP_METADATA,
            f"no {DCP_METADATA}: the save was never committed (DCP writes it last); the data files of ranks "
            f"{directory.ranks} cannot be restored",
        )
        return
    if directory.metadata_files[0].name != DCP_METADATA:
        with_metadata = {int(m.group(1)) for f in directory.metadata_files if (m := DCP_RANK_METADATA.match(f.name))}
        for rank in sorted(set(directory.ranks) - with_metadata):
            yield ShardProblem(
                "uncommitted-save",
                directory.path / f"__{rank}{DCP_METADATA}",
                f"rank {rank} wrote data files but not its __{rank}{DCP_METADATA}: its part of the save was never committed",
            )


METADATA_SIZE_LIMIT = 1 << 30
"""`.metadata` grows with tensors × chunks; a gibibyte is far beyond any real save's."""


def _read_metadata(directory: DcpDirectory) -> DcpMetadata | None:
    parts = []
    for file in directory.metadata_files:
        root, globals_ = unpickle_metadata(read_bytes(file, METADATA_SIZE_LIMIT), file)
        directory.globals.extend(globals_)
        try:
            parts.append(parse_metadata(root, file))
        except CorruptCheckpointError as exc:
            directory.problems.append(ShardProblem("metadata-malformed", file, str(exc).removeprefix(f"{file}: ")))
    if not parts or len(parts) < len(directory.metadata_files):
        return None
    unknown = sorted({str(part.version) for part in parts if part.version not in KNOWN_VERSIONS})
    if unknown:
        message = f"metadata version {', '.join(unknown)} is not one this reader knows (1.0.0 or none)"
        directory.problems.append(ShardProblem("metadata-version-unknown", directory.metadata_files[0], message))
        return None
    try:
        return _merge(parts)
    except CorruptCheckpointError as exc:
        directory.problems.append(ShardProblem("metadata-malformed", directory.metadata_files[0], str(exc)))
        return None


def _merge(parts: list[DcpMetadata]) -> DcpMetadata:
    """One metadata from the per-rank files of a save without collectives: each names its own chunks."""
    if len(parts) == 1:
        return parts[0]
    tensors: dict[str, TensorItem] = {}
    byte_items: dict[str, BytesItem] = {}
    for part in parts:
        for tensor in part.tensors:
            tensors[tensor.fqn] = _merged(tensors.get(tensor.fqn), tensor)
        for item in part.byte_items:
            byte_items.setdefault(item.fqn, item)
    return DcpMetadata(parts[0].version, tuple(tensors.values()), tuple(byte_items.values()), parts[0].save_id)


def _merged(known: TensorItem | None, more: TensorItem) -> TensorItem:
    """`known` with the chunks another rank's metadata records; a chunk both record is a replica.
    `CorruptCheckpointError` when the two disagree on the tensor's dtype or shape."""
    if known is None:
        return more
    if (known.dtype, known.shape) != (more.dtype, more.shape):
        raise CorruptCheckpointError(
            f"{known.fqn}: the ranks' metadata disagree: {known.dtype} {list(known.shape)} and {more.dtype} {list(more.shape)}"
        )
    boxes = {(chunk.offsets, chunk.sizes) for chunk in known.chunks}
    new = tuple(chunk for chunk in more.chunks if (chunk.offsets, chunk.sizes) not in boxes)
    copies = tuple(chunk for chunk in more.chunks if (chunk.offsets, chunk.sizes) in boxes)
    return replace(known, chunks=known.chunks + new, replicas=known.replicas + copies)


def _structure_problems(directory: DcpDirectory) -> Iterator[ShardProblem]:
    metadata_file = directory.metadata_files[0]
    referenced: set[str] = set()
    for tensor in directory.tensors:
        for message in tiling_problems(tensor):
            yield ShardProblem("tensor-not-tiled", metadata_file, f"{tensor.fqn}: {message}", tensor.fqn)
        for chunk in tensor.stored_chunks:
            what = f"{tensor.fqn}: chunk at {list(chunk.offsets)}"
            yield from _location_problems(directory, what, chunk.location, tensor.fqn)
            referenced.update([chunk.location.file] if chunk.location else [])
    for item in directory.byte_items:
        yield from _location_problems(directory, item.fqn, item.location, item.fqn)
        referenced.update([item.location.file] if item.location else [])
    for name in sorted(set(directory.data_files) - referenced):
        yield ShardProblem(
            "unreferenced-shard", directory.path / name, f"{name} is not named by the metadata: a file of another save"
        )


def _location_problems(directory: DcpDirectory, what: str, location: SliceLocation | None, fqn: str) -> Iterator[ShardProblem]:
    if location is None:
        yield ShardProblem("slice-missing", directory.metadata_files[0], f"{what}: the metadata records no file for it", fqn)
        return
    size = directory.data_files.get(location.file)
    file = directory.path / location.file
    if size is None:
        yield ShardProblem("slice-missing", file, f"{what}: {directory.where(location)}: the file is missing", fqn)
    elif location.offset + location.length > size:
        yield ShardProblem(
            "slice-out-of-range",
            file,
            f"{what}: {directory.where(location)}: the file has only {size} bytes (truncated)",
            fqn,
        )


def inspect_dcp_directory(path: Path) -> Inspection:
    """Summarise a DCP directory: ranks, files, every tensor with its chunk count. A directory with
    structural damage (see `open_dcp_directory`) is a `CorruptCheckpointError` listing it."""
    directory = open_dcp_directory(path)
    if directory.problems:
        shown = "; ".join(problem.message for problem in directory.problems[:_REPORTED])
        more = f" (and {len(directory.problems) - _REPORTED} more)" if len(directory.problems) > _REPORTED else ""
        raise CorruptCheckpointError(f"{path}: {shown}{more}")
    components = plain_components({tensor.path[0]: {} for tensor in directory.tensors})
    by_key = {at: name for name, at in components.items()}
    tensors = [
        TensorSummary(
            key=join_pointer(tensor.path),
            dtype=tensor.dtype,
            shape=tensor.shape,
            nbytes=_nbytes(tensor),
            component=by_key.get(join_pointer(tensor.path[:1])),
        )
        for tensor in directory.tensors
    ]
    for item in directory.byte_items:
        try:
            directory.read_value(item)
        except CkptspecError:
            pass  # a slice that cannot be read is a structural problem, refused above; a stopped pickle keeps its globals
    metadata: dict[str, Any] = {
        "layout": "lightning-sharded" if directory.lightning_meta is not None else "dcp",
        "dcp_version": directory.metadata.version if directory.metadata else None,
        "ranks": directory.ranks,
        "shards": {name: size for name, size in directory.data_files.items()},
        "chunks": {join_pointer(t.path): len(t.chunks) for t in directory.tensors},
        "byte_items": {join_pointer(item.path): _stored_at(item) for item in directory.byte_items},
    }
    return Inspection(
        path=str(path),
        format="dcp",
        files=[FileSummary(str(file), file.stat().st_size) for file in directory.files],
        tensors=tensors,
        globals=_counted([*directory.globals, *itertools.chain.from_iterable(directory.item_globals.values())]),
        metadata=metadata,
        components=components,
    )


def _stored_at(item: BytesItem) -> dict[str, Any] | None:
    """Where a non-tensor item's pickle lies: file, offset and length in bytes."""
    if item.location is None:
        return None
    return {"file": item.location.file, "offset": item.location.offset, "length": item.location.length}


def _counted(named: list[GlobalRef]) -> list[GlobalRef]:
    """`named` with each global once, its counts summed."""
    counts: dict[str, GlobalRef] = {}
    for used in named:
        known = counts.get(used.qualname)
        counts[used.qualname] = used if known is None else replace(known, count=known.count + used.count)
    return list(counts.values())


def _nbytes(tensor: TensorItem) -> int:
    return math.prod(tensor.shape) * DTYPE_ITEMSIZE.get(tensor.dtype, 0)
