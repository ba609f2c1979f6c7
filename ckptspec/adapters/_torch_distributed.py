"""Sharded save and restore with torch.distributed.checkpoint: each rank's random generators go
with that rank, the manifest is written once the save is committed, and a restore on another
world size is refused unless it is asked for.

Every rank calls these functions, as it calls `dcp.save`, `dcp.async_save` and `dcp.load`.

The ranks write through `_InventoryWriter`, DCP's file-system writer whose streams digest every
buffer on its way to the file, in one pass: the running CRC32C, kept where each buffer ends, and
SHA-256 when the spec asks for it. torch.save writes a storage record in a call of its own, from
the storage's memory, so a chunk's tensor bytes start and end between buffers, and their CRC32C
follows from the running values at both ends without reading the file again; the buffer is known
by its address and size, or, for a tensor DCP copies before writing, found in the slice's zip
directory. The digests travel to rank 0 (of the process group) with DCP's write results, and so
do the plain values (numbers, strings) of the non-tensor items each rank wrote, such as the
generator states' scalars. Rank 0 commits `.metadata`, then writes the manifest from the metadata
it committed and what it received, reading no file of the save back; the manifest is therefore
the marker of a finished save.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import field, replace
from pathlib import Path
from typing import IO, Any

import numpy
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter, _StoragePrefix
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from .._dataclass import dataclass
from .._atomic import Staged
from .._commit import Save, as_committed, saving
from .._crc32c import crc32c, crc32c_combine
from .._sidecars import manifest_path_for
from .._exceptions import AdapterError, CorruptCheckpointError, RestoreError
from .._models import Requirement, Spec
from .._pointer import join_pointer
from .._records import file_algorithms
from .._scan import Algorithm, FileDigests
from ..adopt import KnownDigests, build_manifest
from ..formats._dcp_metadata import DTYPE_NAMES, KNOWN_VERSIONS, BytesItem, Chunk, DcpMetadata, SliceLocation, TensorItem
from ..formats.dcp import SHARDED_SAVE_KEY, ChunkKey, KnownSave, combined_crc32c, rank_key
from ..formats.torchzip import TorchCheckpoint
from ..formats._tensors import TensorRef
from ..signing import sign_at_save
from ._spec import as_spec, raise_if_unmet, requirement
from ._torch_replay import capture_rng, restore_rng

__all__ = ["ShardedRestore", "async_save_sharded", "restore_sharded", "save_sharded"]

_PARALLEL_BYTES = 1 << 20  # below this, handing a buffer to the other thread costs more than digesting it
_PLAIN_VALUES = (int, float, str, bool, type(None))
"""Types of the non-tensor values a rank passes to rank 0: the restricted unpickler reads each of
them back from its slice as the same value, so the manifest need not read the slice."""
_PASSED_CHARACTERS = 1 << 12
"""A longer string stays in its slice: the gather to rank 0 carries small values only."""


@dataclass(frozen=True)
class ShardedRestore:
    saved_world_size: int
    world_size: int
    rng_restored: bool
    """False only when resharding onto another world size: no saved rank's generators belong to this one."""


def save_sharded(
    directory: str | os.PathLike[str],
    state_dict: Mapping[str, Any],
    *,
    spec: Spec | str | os.PathLike[str] | None = None,
    process_group: dist.ProcessGroup | None = None,
    signing_key: str | os.PathLike[str] | None = None,
) -> Path:
    """`dcp.save` of `state_dict` plus this rank's RNG states, then `<directory>.ckptspec.yaml`
    (and, with `signing_key` or `CKPTSPEC_SIGNING_KEY`, `<directory>.sig` over every file of the
    directory and the manifest, written by rank 0).

    Each rank digests the bytes it writes as it writes them: the CRC32C of each chunk, and the
    file digests the spec asks for (CRC32C by default, SHA-256 only when `integrity.file_digest`
    says so). Rank 0 receives them with DCP's write results, commits `.metadata`, combines each
    tensor's CRC32C from its chunks' and builds the manifest without reading the data files. The
    ranks write into a staging directory beside `directory`, which takes its place with the
    manifest in one step (`ckptspec._commit`): a save killed at any moment leaves the previous
    directory with its manifest, or the new one with its own. No rank returns before the commit.
    `directory` is a local path (a URL raises `AdapterError`). Returns the manifest's path (on
    every rank).

    A spec that requires what a sharded save never records (construction config, data position,
    fingerprint) or forbids generator states is an `AdapterError` before anything is written."""
    writer = _InventoryWriter(directory, _meetable(as_spec(spec), directory), signing_key)
    try:
        dcp.save(_with_own_state(state_dict, process_group), storage_writer=writer, process_group=process_group)
    finally:
        writer.abandon()
    return manifest_path_for(directory)


def async_save_sharded(
    directory: str | os.PathLike[str],
    state_dict: Mapping[str, Any],
    *,
    spec: Spec | str | os.PathLike[str] | None = None,
    process_group: dist.ProcessGroup | None = None,
    signing_key: str | os.PathLike[str] | None = None,
) -> Future[Path]:
    """`save_sharded` through `dcp.async_save`: returns once this rank's state is copied to CPU
    memory; the files are written in a background thread. The future resolves to the manifest's
    path once every rank has written its files and rank 0 has committed `.metadata` and written
    the manifest, or raises what stopped the save. A save that fails or is cut off leaves no
    manifest: only a directory with its manifest is a finished checkpoint.

    As with `dcp.async_save`, the process group must have a CPU backend (gloo), and the save's
    collectives run in the background thread: training collectives on the same group meanwhile
    should go through another group. A spec it cannot meet is refused as by `save_sharded`."""
    writer = _InventoryWriter(directory, _meetable(as_spec(spec), directory), signing_key)
    started = dcp.async_save(_with_own_state(state_dict, process_group), storage_writer=writer, process_group=process_group)
    upload = started if isinstance(started, Future) else started.upload_completion
    finished: Future[Path] = Future()

    def settle(done: Future[Any]) -> None:
        writer.abandon()
        error = done.exception()
        if error is not None:
            finished.set_exception(error)
        else:
            finished.set_result(manifest_path_for(directory))

    upload.add_done_callback(settle)
    return finished


_NEVER_RECORDED = {
    "config": "a state dict holds no construction config",
    "data_position": "a DCP state dict has no place ckptspec reads it from",
    "fingerprint": "it takes no fixed batch",
}
"""Components a sharded save's manifest never records, and why."""


def _meetable(spec: Spec | None, directory: str | os.PathLike[str]) -> Spec | None:
    """`spec`, when a sharded save can meet it: its manifest records the model, optimizer and
    scheduler state it is given and every rank's generators, never the components above."""
    if spec is None:
        return None
    problems = [
        f"components.{name} is required, but save_sharded never records it ({why}); make it optional in the spec"
        for name, why in _NEVER_RECORDED.items()
        if requirement(spec, name) is Requirement.required
    ]
    if requirement(spec, "rng") is Requirement.forbidden:
        problems.append("components.rng is forbidden, but save_sharded saves every rank's generators")
    raise_if_unmet(spec, problems, by=f"save_sharded of {directory} (nothing written)")
    return spec


def _with_own_state(state_dict: Mapping[str, Any], process_group: dist.ProcessGroup | None) -> dict[str, Any]:
    """`state_dict` with what ckptspec saves beside it: the world size and this rank's generators."""
    rank, world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
    return {**state_dict, SHARDED_SAVE_KEY: {"world_size": world_size, "rng": {rank_key(rank): capture_rng()}}}


@dataclass(frozen=True)
class _Inventoried:
    """The storage data of one write result on its way to rank 0: DCP's own, and the
    digests of the bytes behind it (`finish` hands DCP its own part alone)."""

    storage: Any
    """DCP's `_StorageInfo`: the file, offset and length of the item."""
    file: FileDigests
    """Of the whole file the item was written to."""
    chunk: tuple[int, int] | None
    """`(CRC32C, byte count)` of the tensor's bytes; None for a non-tensor item."""
    value: tuple[Any] | None = None
    """`(value,)` of a non-tensor item of a plain type (see `_PLAIN_VALUES`); None when rank 0 reads it from its slice."""


@dataclass
class _Runs:
    """The running CRC32C of a file where each buffer written to it ended (and 0 at its start): the
    CRC32C of the bytes between two such places follows from the two values and the distance."""

    crc_at: dict[int, int] = field(default_factory=lambda: {0: 0})
    starts: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    """Where each buffer written from the memory of an awaited tensor (by address and size) starts."""

    def crc32c(self, start: int, end: int) -> int | None:
        """CRC32C of `[start, end)` when both ends lie between buffers, else None."""
        before, through = self.crc_at.get(start), self.crc_at.get(end)
        if before is None or through is None:
            return None
        return through ^ crc32c_combine(before, 0, end - start)


class _DigestingStream:
    """The file object DCP writes a data file through: every buffer feeds the running CRC32C (and
    SHA-256 when the spec asks for it) on its way, in a second thread while it is written when it
    is large (crc32c and hashlib release the GIL); buffers written from the memory of the tensors
    `awaited` (by address and size) are noted where they start."""

    def __init__(
        self, handle: IO[bytes], algorithms: tuple[Algorithm, ...], pool: ThreadPoolExecutor, awaited: Collection[tuple[int, int]]
    ) -> None:
        self._handle = handle
        self._pool = pool
        self._algorithms = algorithms
        self._awaited = awaited
        self._awaited_sizes = {size for _, size in awaited}
        self._crc32c = 0
        self._sha256 = hashlib.sha256() if "sha256" in algorithms else None
        self.size = 0
        self.runs = _Runs()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._note_if_awaited(view)
        if view.nbytes >= _PARALLEL_BYTES:
            digesting = self._pool.submit(self._digest, view)
            self._handle.write(view)
            digesting.result()
        else:
            self._digest(view)
            self._handle.write(view)
        self.size += view.nbytes
        self.runs.crc_at[self.size] = self._crc32c
        return view.nbytes

    def _note_if_awaited(self, view: memoryview) -> None:
        """Where the buffer starts, when it is written from the memory of an awaited tensor (its
        address tells it from the other buffers of its size)."""
        if view.nbytes in self._awaited_sizes:
            buffer = (numpy.frombuffer(view, numpy.uint8).ctypes.data, view.nbytes)
            if buffer in self._awaited:
                self.runs.starts.setdefault(buffer, []).append(self.size)

    def _digest(self, view: memoryview) -> None:
        if self._sha256 is not None:
            self._sha256.update(view)
        self._crc32c = crc32c(view, self._crc32c)

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._handle.flush()

    def fileno(self) -> int:
        return self._handle.fileno()

    def close(self) -> None:
        self._handle.close()

    def digests(self) -> FileDigests:
        """The file digests the spec asks for."""
        return FileDigests(
            crc32c=f"{self._crc32c:08x}" if "crc32c" in self._algorithms else None,
            sha256=self._sha256.hexdigest() if self._sha256 is not None else None,
        )


class _DigestingFileSystem(FileSystem):
    """DCP's local file system, whose write streams digest what goes through them; `written`
    keeps, by path, each closed file's digests and buffers, and where the buffers `awaited` (by
    address and size) start in it."""

    def __init__(self, algorithms: tuple[Algorithm, ...]) -> None:
        self._algorithms = algorithms
        self.written: dict[Path, tuple[FileDigests, _Runs]] = {}
        self.awaited: Collection[tuple[int, int]] = frozenset()

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with ExitStack() as stack:
            handle = stack.enter_context(super().create_stream(path, mode))
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=1))
            stream = _DigestingStream(handle, self._algorithms, pool, self.awaited)  # type: ignore[arg-type]
            yield stream
            self.written[Path(path)] = (stream.digests(), stream.runs)


@dataclass
class _StagedPrefix(_StoragePrefix):
    """A rank's file prefix, and the staging directory rank 0 made for this save's files."""

    directory: str = ""


class _InventoryWriter(FileSystemWriter):
    """`FileSystemWriter` whose ranks digest what they write into a staging directory beside the
    checkpoint, and whose rank 0 commits `.metadata`, then the directory with its manifest (see
    `ckptspec._commit`), and signs.

    Rank 0 takes the lock of the checkpoint's saves and makes the staging directory when it plans
    the save, before any rank writes; the plan it hands each rank names the directory. The lock is
    released when the commit is done, or when the save fails (`abandon`)."""

    def __init__(self, directory: str | os.PathLike[str], spec: Spec | None, signing_key: str | os.PathLike[str] | None) -> None:
        if "://" in os.fspath(directory):
            raise AdapterError(f"{directory}: sharded saves go to a local directory (or a mounted one); URLs are not supported")
        super().__init__(directory)
        self.fs: _DigestingFileSystem = _DigestingFileSystem(file_algorithms(spec))
        self._spec = spec
        self._signing_key = signing_key
        self._buffers: dict[ChunkKey, tuple[int, int]] = {}
        self._target = Path(directory)
        self._held = ExitStack()
        self._commit: tuple[Save, Staged] | None = None

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        save = self._held.enter_context(saving(self._target))
        staged = self._held.enter_context(save.tree())
        self._commit = (save, staged)
        planned = super().prepare_global_plan(plans)
        return [replace(plan, storage_data=_StagedPrefix(plan.storage_data.prefix, str(staged.temporary))) for plan in planned]

    def abandon(self) -> None:
        """Release what a save that did not finish holds: the lock, and its staging directory."""
        self._commit = None
        self._held.close()

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> torch.futures.Future[list[WriteResult]]:
        self.path = Path(plan.storage_data.directory)  # every rank writes into the staging directory
        self._buffers = _tensor_buffers(plan, planner)
        self.fs.awaited = frozenset(self._buffers.values())
        results = super().write_data(plan, planner).wait()  # written by the time it returns
        inventoried: torch.futures.Future[list[WriteResult]] = torch.futures.Future()
        inventoried.set_result([replace(result, storage_data=self._inventoried(result, planner)) for result in results])
        self.fs.written.clear()
        return inventoried

    def _inventoried(self, result: WriteResult, planner: SavePlanner) -> _Inventoried:
        info = result.storage_data
        path = Path(self.path) / info.relative_path
        digests, runs = self.fs.written[path]
        if result.index.offset is not None:
            return _Inventoried(storage=info, file=digests, chunk=self._chunk(result, path, runs))
        value = planner.lookup_object(result.index)  # type: ignore[attr-defined]  # save_sharded's planner is DCP's default
        return _Inventoried(storage=info, file=digests, chunk=None, value=(value,) if _passed(value) else None)

    def _chunk(self, result: WriteResult, path: Path, runs: _Runs) -> tuple[int, int]:
        """`(CRC32C, byte count)` of the tensor bytes of the item `result` names: those of the
        buffer written from the tensor's memory inside the item's slice, else `_chunk_crc32c`."""
        start, end = result.storage_data.offset, result.storage_data.offset + result.storage_data.length
        buffer = self._buffers.get((result.index.fqn, tuple(result.index.offset or ())))
        size = buffer[1] if buffer is not None else 0
        for at in runs.starts.get(buffer, []) if buffer is not None else []:
            if start <= at and at + size <= end and (crc := runs.crc32c(at, at + size)) is not None:
                return crc, size
        return _chunk_crc32c(path, start, end, runs)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        inventories = [(result.index, result.storage_data) for rank_results in results for result in rank_results]
        super().finish(metadata, [[replace(result, storage_data=result.storage_data.storage) for result in rank] for rank in results])
        directory = Path(self.path)
        chunks = {(index.fqn, tuple(index.offset)): item.chunk for index, item in inventories if item.chunk is not None}
        files = {directory / item.storage.relative_path: item.file for _, item in inventories}
        committed = Path(self._get_metadata_path())
        if (metadata_written := self.fs.written.get(Path(f"{committed}.tmp"))) is not None:
            files[committed] = metadata_written[0]
        values = {index.fqn: item.value[0] for index, item in inventories if item.value is not None}
        held = _committed(metadata)
        tensors = _tensor_crc32cs(held, chunks) if held is not None else {}
        known = KnownDigests(tensors=tensors, files=files, dcp=KnownSave(held, values))
        assert self._commit is not None
        save, staged = self._commit
        save.commit(staged, as_committed(build_manifest(directory, self._spec, known=known), staged))
        self.abandon()
        sign_at_save(self._target, self._signing_key)


def _passed(value: Any) -> bool:
    """Whether a rank passes the non-tensor `value` to rank 0 rather than leave it to be read back."""
    return type(value) in _PLAIN_VALUES and not (isinstance(value, str) and len(value) > _PASSED_CHARACTERS)


def _tensor_buffers(plan: SavePlan, planner: SavePlanner) -> dict[ChunkKey, tuple[int, int]]:
    """`(address, size)` of the memory torch.save will write each tensor item's bytes from, by
    chunk, for the tensors it writes as they are: contiguous CPU tensors that fill their storage
    (DCP copies the others before writing them)."""
    found = {}
    for item in plan.items:
        if item.type == WriteItemType.BYTE_IO:
            continue
        tensor = planner.resolve_data(item)
        if tensor.device.type == "cpu" and tensor.is_contiguous() and 0 < tensor.nbytes == tensor.untyped_storage().nbytes():
            found[(item.index.fqn, tuple(item.index.offset))] = (tensor.data_ptr(), tensor.nbytes)  # type: ignore[arg-type]
    return found


def _committed(metadata: Metadata) -> DcpMetadata | None:
    """The metadata DCP has just committed, as the reader reads `.metadata` (`parse_metadata`); None
    when it holds a version or a dtype the reader does not know: the manifest then reads the file
    and judges it."""
    version = getattr(metadata, "version", None)
    dtypes = {str(item.properties.dtype).removeprefix("torch.") for item in metadata.state_dict_metadata.values() if isinstance(item, TensorStorageMetadata)}
    if version not in KNOWN_VERSIONS or not dtypes <= DTYPE_NAMES:
        return None
    storage = {(index.fqn, None if index.offset is None else tuple(index.offset)): info for index, info in (metadata.storage_data or {}).items()}
    planner = metadata.planner_data or {}
    tensors, byte_items = [], []
    for fqn, item in metadata.state_dict_metadata.items():
        path = tuple(planner.get(fqn, (fqn,)))
        if isinstance(item, TensorStorageMetadata):
            chunks = tuple(Chunk(tuple(c.offsets), tuple(c.sizes), _location(storage.get((fqn, tuple(c.offsets))))) for c in item.chunks)
            tensors.append(TensorItem(fqn, path, str(item.properties.dtype).removeprefix("torch."), tuple(item.size), chunks))
        else:
            byte_items.append(BytesItem(fqn, path, _location(storage.get((fqn, None)))))
    storage_meta = getattr(metadata, "storage_meta", None)  # recorded since torch 2.4
    save_id = storage_meta.save_id if storage_meta is not None else None
    return DcpMetadata(version, tuple(tensors), tuple(byte_items), save_id)


def _location(info: Any) -> SliceLocation | None:
    """DCP's `_StorageInfo` of an item as the reader has it."""
    if info is None:
        return None
    return SliceLocation(str(info.relative_path), info.offset, info.length, tuple(getattr(info, "transform_descriptors", None) or ()))


def _chunk_crc32c(path: Path, start: int, end: int, runs: _Runs) -> tuple[int, int]:
    """`(CRC32C, byte count)` of the tensor in the torch.save archive at `[start, end)` of `path`,
    from the running CRC32C of the writes. Only the archive's directory and pickle are read, unless
    the tensor is a strided view (its CRC32C is over its elements in row-major order, read then)."""
    with TorchCheckpoint(path, start, end) as archive:
        tensor = archive.tree
        if not isinstance(tensor, TensorRef):
            raise CorruptCheckpointError(f"{path}: bytes {start}..{end}, just written, hold no tensor")
        written = runs.crc32c(*tensor.byte_range) if tensor.is_contiguous else None
        return (written if written is not None else tensor.crc32c()), tensor.nbytes


def _tensor_crc32cs(committed: DcpMetadata, chunks: Mapping[ChunkKey, tuple[int, int]]) -> dict[str, str]:
    """Tensor pointer → CRC32C of every tensor of the metadata just committed, from its chunks'."""
    found = {}
    for tensor in committed.tensors:
        try:
            crc = combined_crc32c(tensor.fqn, (chunk.offsets for chunk in tensor.chunks), chunks)
        except KeyError:
            continue  # a chunk no rank digested: the manifest's own reading reports it
        found[join_pointer(tensor.path)] = f"{crc:08x}"
    return found


def restore_sharded(
    directory: str | os.PathLike[str],
    state_dict: dict[str, Any],
    *,
    allow_resharding: bool = False,
    process_group: dist.ProcessGroup | None = None,
) -> ShardedRestore:
    """`dcp.load` into `state_dict` (in place, as DCP does), and put back the generators this rank saved.

    Raises `RestoreError` when the checkpoint was saved by another number of ranks, unless
    `allow_resharding`: then the tensors are resharded by DCP, and no generator is restored (the
    report says so), since no saved rank's generators are this rank's."""
    rank, world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
    recorded: dict[str, Any] = {SHARDED_SAVE_KEY: {"world_size": -1}}
    dcp.load(recorded, checkpoint_id=directory, process_group=process_group)
    saved_world_size = recorded[SHARDED_SAVE_KEY]["world_size"]
    if saved_world_size != world_size and not allow_resharding:
        raise RestoreError(
            f"{directory}: saved by {saved_world_size} ranks, restoring on {world_size}; pass "
            "allow_resharding=True to reshard (the random generators are then not restored)"
        )
    if saved_world_size != world_size:
        _load_in_place(state_dict, {}, directory, process_group)
        return ShardedRestore(saved_world_size, world_size, rng_restored=False)
    generators = capture_rng()  # the template DCP loads this rank's saved states into
    _load_in_place(state_dict, {SHARDED_SAVE_KEY: {"rng": {rank_key(rank): generators}}}, directory, process_group)
    restore_rng(generators)
    return ShardedRestore(saved_world_size, world_size, rng_restored=True)


def _load_in_place(
    state_dict: dict[str, Any], own: dict[str, Any], directory: str | os.PathLike[str], process_group: dist.ProcessGroup | None
) -> None:
    """`dcp.load` of `state_dict` and `own` together; top-level values DCP replaces go back into `state_dict`."""
    combined = {**state_dict, **own}
    dcp.load(combined, checkpoint_id=directory, process_group=process_group)
    state_dict.update({key: combined[key] for key in state_dict})
