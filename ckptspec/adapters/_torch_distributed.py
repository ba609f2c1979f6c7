"""Sharded save and restore with torch.distributed.checkpoint: each rank's random generators go
with that rank, the manifest is written after the save is committed, and a restore on another
world size is refused unless it is asked for.

Every rank calls both functions, as it calls `dcp.save` and `dcp.load`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from .._documents import manifest_path_for
from .._exceptions import RestoreError
from .._models import Spec
from .._pointer import join_pointer
from .._records import file_algorithms, write_manifest
from .._scan import Algorithm, FileDigests, scan
from ..adopt import KnownDigests, build_manifest
from ..formats.dcp import ChunkKey, open_dcp_directory
from ..signing import sign_at_save
from ._spec import as_spec
from ._torch_replay import capture_rng, restore_rng

__all__ = ["ShardedRestore", "restore_sharded", "save_sharded"]

_OWN = "ckptspec"
"""Top-level key of what ckptspec adds to the saved state: `world_size`, and `rng/rank<R>` per rank."""


@dataclass(frozen=True)
class ShardedRestore:
    saved_world_size: int
    world_size: int
    rng_restored: bool
    """False only when resharding onto another world size: no saved rank's generators belong to this one."""


def _rank_key(rank: int) -> str:
    return f"rank{rank}"


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

    Once `.metadata` is committed and every rank has returned from the save, each rank reads its
    own data files once for its chunks' CRC32Cs and the file digests the spec asks for (CRC32C by
    default, SHA-256 only when `integrity.file_digest` says so); rank 0 gathers them, combines each
    tensor's CRC32C from its chunks', and writes the manifest without reading another rank's
    bytes, so a manifest beside the directory marks a finished save. Returns the manifest's path (on every rank)."""
    rank, world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
    loaded = as_spec(spec)
    own = {"world_size": world_size, "rng": {_rank_key(rank): capture_rng()}}
    dcp.save({**state_dict, _OWN: own}, checkpoint_id=directory, process_group=process_group)
    dist.barrier(process_group)
    digests = _own_digests(Path(directory), rank, file_algorithms(loaded))
    gathered: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object(digests, gathered, dst=dist.get_global_rank(process_group, 0) if process_group else 0, group=process_group)
    if gathered is not None:
        write_manifest(build_manifest(Path(directory), loaded, known=_known(Path(directory), gathered)), directory)
        sign_at_save(directory, signing_key)
    dist.barrier(process_group)
    return manifest_path_for(directory)


def _own_digests(
    directory: Path, rank: int, algorithms: tuple[Algorithm, ...]
) -> tuple[dict[ChunkKey, tuple[int, int]], dict[Path, FileDigests]]:
    """What this rank checksums of the save, reading each of its data files once (rank 0 adds the
    metadata): the CRC32C of every chunk it stored and the file digests the manifest records."""
    layout = open_dcp_directory(directory)
    ranges = layout.chunk_ranges(rank)
    chunks: dict[ChunkKey, tuple[int, int]] = {}
    files = {}
    for file in [*layout.rank_files(rank), *(layout.metadata_files if rank == 0 else [])]:
        spans = {key: (start, end) for key, (path, start, end) in ranges.items() if path == file}
        scanned = scan(file, algorithms=algorithms, crc32c_ranges=spans.values())
        files[file] = scanned.digests
        chunks.update({key: (scanned.range_crc32c.get(span, 0), span[1] - span[0]) for key, span in spans.items()})
    return {**chunks, **layout.chunk_crc32cs(rank, skip=chunks.keys())}, files


def _known(directory: Path, gathered: list[Any]) -> KnownDigests:
    layout = open_dcp_directory(directory)
    chunks = {key: value for rank_chunks, _ in gathered for key, value in rank_chunks.items()}
    files = {path: digests for _, rank_files in gathered for path, digests in rank_files.items()}
    tensors = {}
    for tensor in layout.tensors:
        try:
            tensors[join_pointer(tensor.path)] = f"{layout.combined_crc32c(tensor, chunks):08x}"
        except KeyError:
            continue  # a chunk no rank could read: the manifest's own reading reports it
    return KnownDigests(tensors=tensors, files=files)


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
    recorded: dict[str, Any] = {_OWN: {"world_size": -1}}
    dcp.load(recorded, checkpoint_id=directory, process_group=process_group)
    saved_world_size = recorded[_OWN]["world_size"]
    if saved_world_size != world_size and not allow_resharding:
        raise RestoreError(
            f"{directory}: saved by {saved_world_size} ranks, restoring on {world_size}; pass "
            "allow_resharding=True to reshard (the random generators are then not restored)"
        )
    if saved_world_size != world_size:
        _load_in_place(state_dict, {}, directory, process_group)
        return ShardedRestore(saved_world_size, world_size, rng_restored=False)
    generators = capture_rng()  # the template DCP loads this rank's saved states into
    _load_in_place(state_dict, {_OWN: {"rng": {_rank_key(rank): generators}}}, directory, process_group)
    restore_rng(generators)
    return ShardedRestore(saved_world_size, world_size, rng_restored=True)


def _load_in_place(
    state_dict: dict[str, Any], own: dict[str, Any], directory: str | os.PathLike[str], process_group: dist.ProcessGroup | None
) -> None:
    """`dcp.load` of `state_dict` and `own` together; top-level values DCP replaces go back into `state_dict`."""
    combined = {**state_dict, **own}
    dcp.load(combined, checkpoint_id=directory, process_group=process_group)
    state_dict.update({key: combined[key] for key in state_dict})
