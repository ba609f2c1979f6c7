"""Build a `CheckpointView` from the TensorFlow bundle reader and its verifier."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crc32c

from .._storage import location
from .._pointer import join_pointer
from .._scan import Algorithm, FileDigests, file_digests
from ..formats.sstable import unmask_crc
from ..formats.tfbundle import OBJECT_GRAPH_KEY, Bundle, BundleEntry, open_bundle
from ._view import CheckpointView, Problem, TensorInfo

__all__ = ["tf_view"]

def tf_view(prefix: Path, recorded: Mapping[Path, FileDigests] | None = None) -> CheckpointView:
    """The view of a bundle; its `problems` are what the bundle's verification finds.

    With digests `recorded` for its files (by resolved path), each file is read once, the files in
    parallel, for its digests. When every data shard's digests are the recorded ones, its bytes are
    as they were written, so the tensors' stored checksums are not read again: only the layout is
    verified. Otherwise every stored checksum is, to name the damaged tensors."""
    bundle = open_bundle(prefix)
    roles_unknown = _roles_unknown(bundle)
    tensors = {entry.pointer: _tensor_info(bundle, entry, roles_unknown is None) for entry in bundle.entries.values()}
    files = [bundle.index_path, *_shards_present(bundle)]
    wanted = {path: (recorded or {}).get(path.resolve(), FileDigests()) for path in files}
    digests = _digests(wanted)
    shards = files[1:]
    intact = bool(shards) and all(wanted[path].intact(digests.get(path)) for path in shards)
    return CheckpointView(
        path=prefix,
        format="tf-bundle",
        tree={entry.key: tensors[entry.pointer] for entry in bundle.entries.values()},
        tensors=tensors,
        files=files,
        problems=_problems(bundle, checksums=not intact),
        digests={path.resolve(): digests[path] for path in digests},
        roles_unknown=roles_unknown,
    )


def _digests(wanted: Mapping[Path, FileDigests]) -> dict[Path, FileDigests]:
    """Each file's digests named in `wanted`, the files read in parallel (reading and hashing release
    the GIL); a file that cannot be read is left out, for the verifier and the checks to report."""
    jobs = {path: expected.algorithms for path, expected in wanted.items() if expected.algorithms}
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
        read = dict(zip(jobs, pool.map(_digests_or_none, jobs, jobs.values())))
    return {path: digests for path, digests in read.items() if digests is not None}


def _digests_or_none(path: Path, algorithms: tuple[Algorithm, ...]) -> FileDigests | None:
    try:
        return file_digests(path, algorithms)
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


def _tensor_info(bundle: Bundle, entry: BundleEntry, placed: bool) -> TensorInfo:
    return TensorInfo(
        pointer=entry.pointer,
        dtype=entry.dtype.name,
        shape=entry.shape,
        file=bundle.shard_path(entry.shard_id),
        component=entry.component if placed else None,
        role=entry.role if placed else None,
        read_crc32c=lambda: _stored_crc(bundle, entry),
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
