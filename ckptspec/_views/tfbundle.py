"""Build a `CheckpointView` from the TensorFlow bundle reader and its verifier."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import _crc32c as crc32c
from .._crc32c import crc32c_combine
from .._storage import location, resolved
from .._pointer import join_pointer
from .._scan import Algorithm, FileDigests, Scan, scan
from ..formats.sstable import unmask_crc
from ..formats.tfbundle import OBJECT_GRAPH_KEY, Bundle, BundleEntry, open_bundle
from .base import CheckpointView, Problem, TensorInfo, ViewRequest

__all__ = ["tf_view"]


def tf_view(prefix: Path, request: ViewRequest) -> CheckpointView:
    """The view of a bundle; its `problems` are what the bundle's verification finds.

    With digests recorded for its files (`request.recorded`, by resolved path), each file is read once, the files in
    parallel, for its digests and the CRC32Cs of the partitioned tensors' slices stored in it. When
    every data shard's digests are the recorded ones, its bytes are as they were written, so the
    tensors' stored checksums are not read again: only the layout is verified. Otherwise every
    stored checksum is, to name the damaged tensors."""
    bundle = open_bundle(prefix)
    roles_unknown = _roles_unknown(bundle)
    files = [bundle.index_path, *_shards_present(bundle)]
    wanted = {path: request.digests_of(path) for path in files}
    runs = _partitioned_runs(bundle)
    scans = _scans(bundle, wanted, runs)
    digests = {path: scanned.digests for path, scanned in scans.items()}
    partitioned_crc32c = _partitioned_crc32c(bundle, runs, scans)
    tensors = {
        entry.pointer: _tensor_info(bundle, entry, roles_unknown is None, partitioned_crc32c.get(entry.key))
        for entry in bundle.entries.values()
    }
    shards = files[1:]
    intact = bool(shards) and all(wanted[path].intact(digests.get(path)) for path in shards)
    return CheckpointView(
        path=prefix,
        format="tf-bundle",
        tree={entry.key: tensors[entry.pointer] for entry in bundle.entries.values()},
        tensors=tensors,
        files=files,
        problems=_problems(bundle, checksums=not intact),
        digests={resolved(path): digests[path] for path in digests},
        roles_unknown=roles_unknown,
    )


_MAX_RUNS = 256
"""A partitioned tensor stored in more runs than this (partitioned along an inner axis) has its
CRC32C read from its slices rather than combined from the runs' (combining costs about 0.1 ms each)."""


def _partitioned_runs(bundle: Bundle) -> dict[str, list[tuple[int, int, int]]]:
    """The stored runs of each partitioned tensor, by key (see `Bundle.stored_runs`)."""
    sliced = (entry.key for entry in bundle.entries.values() if entry.is_sliced)
    return {key: runs for key in sliced if (runs := bundle.stored_runs(key, _MAX_RUNS)) is not None}


def _scans(bundle: Bundle, wanted: Mapping[Path, FileDigests], runs: Mapping[str, list[tuple[int, int, int]]]) -> dict[Path, Scan]:
    """One pass over each file with digests `wanted`, also taking the CRC32C of the partitioned
    tensors' runs stored in it; the files read in parallel (reading and hashing release the GIL).
    A file that cannot be read is left out, for the verifier and the checks to report."""
    jobs = {path: expected.algorithms for path, expected in wanted.items() if expected.algorithms}
    if not jobs:
        return {}
    spans: dict[Path, list[tuple[int, int]]] = {}
    for tensor_runs in runs.values():
        for shard_id, offset, length in tensor_runs:
            spans.setdefault(bundle.shard_path(shard_id), []).append((offset, offset + length))
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
        read = dict(zip(jobs, pool.map(_scan_or_none, jobs, jobs.values(), [spans.get(path, []) for path in jobs])))
    return {path: scanned for path, scanned in read.items() if scanned is not None}


def _partitioned_crc32c(bundle: Bundle, runs: Mapping[str, list[tuple[int, int, int]]], scans: Mapping[Path, Scan]) -> dict[str, int]:
    """The CRC32C of each partitioned tensor whose runs the `scans` all read whole, combined from
    the runs' own: its bytes are then not read a second time."""
    combined = {}
    for key, tensor_runs in runs.items():
        value = 0
        for shard_id, offset, length in tensor_runs:
            scanned = scans.get(bundle.shard_path(shard_id))
            if scanned is None or offset + length > scanned.size:
                break
            value = crc32c_combine(value, scanned.range_crc32c.get((offset, offset + length), 0), length)
        else:
            combined[key] = value
    return combined


def _scan_or_none(path: Path, algorithms: tuple[Algorithm, ...], spans: list[tuple[int, int]]) -> Scan | None:
    try:
        return scan(path, algorithms=algorithms, crc32c_ranges=spans)
    except OSError:
        return None


def _roles_unknown(bundle: Bundle) -> str | None:
    # The reader then places keys by their names, a guess that fails for Keras 3's optimizer variables.
    if bundle.object_graph_error is None:
        return None
    return f"the object graph ({OBJECT_GRAPH_KEY}) cannot be read, so which variables belong to the optimizer is unknown"


def _problems(bundle: Bundle, *, checksums: bool) -> list[Problem]:
    return [
        Problem(kind=problem.code, file=location(problem.file), message=problem.message, pointer=_pointer(problem.key))
        for problem in bundle.verify(checksums=checksums)
    ]


def _shards_present(bundle: Bundle) -> list[Path]:
    shards = (bundle.shard_path(shard_id) for shard_id in bundle.present_shards())
    return [shard for shard in shards if shard.is_file()]


def _tensor_info(bundle: Bundle, entry: BundleEntry, placed: bool, crc32c_read: int | None = None) -> TensorInfo:
    return TensorInfo(
        pointer=entry.pointer,
        dtype=entry.dtype.name,
        shape=entry.shape,
        file=bundle.shard_path(entry.shard_id),
        component=entry.component if placed else None,
        role=entry.role if placed else None,
        read_crc32c=lambda: f"{crc32c_read:08x}" if crc32c_read is not None else _stored_crc(bundle, entry),
        read_sha256=lambda: _sha256(bundle, entry),
        read_scalar=(lambda: bundle.decode(entry.key)[0]) if entry.numel == 1 and entry.dtype.is_pod else None,
    )


def _sha256(bundle: Bundle, entry: BundleEntry) -> str:
    digest = hashlib.sha256()
    for chunk in bundle.iter_bytes(entry.key):
        digest.update(chunk)
    return digest.hexdigest()


def _stored_crc(bundle: Bundle, entry: BundleEntry) -> str:
    # The verifier checks stored CRCs against the bytes; a partitioned tensor has none of its own.
    if entry.is_sliced:
        crc = 0
        for chunk in bundle.iter_bytes(entry.key):
            crc = crc32c.crc32c(chunk, crc)
        return f"{crc:08x}"
    return f"{unmask_crc(entry.crc32c):08x}"


def _pointer(key: str | None) -> str | None:
    return None if key is None else join_pointer([key])
