"""Bundle verification: `BundleProblem`, and the `Verifier` behind `verify_bundle` and `Bundle.verify`.

Every check compares what the index claims with what the data shards hold; tensor checksums
(`_tf_checksums`) are computed by a thread pool, in fixed-size chunks, so memory stays flat however
large the shards.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING

from .._dataclass import dataclass
from .._exceptions import ReaderError
from .._storage import location
from ._tf_checksums import ContentError, Shard, TensorChecksums, close_shard, open_shard
from ._tf_index import BundleEntry, TensorSlice, encode_slice_key
from ._tf_objects import OBJECT_GRAPH_KEY
from ._names import TF_DATA_SHARD, prefix_file, prefix_parts
from .sstable import mask_crc, unmask_crc

if TYPE_CHECKING:
    from .tfbundle import Bundle

__all__ = ["SUPPORTED_BUNDLE_VERSION", "BundleProblem", "Verifier", "unreadable_index"]

SUPPORTED_BUNDLE_VERSION = 1
_UNREADABLE_SHARD = "unreadable-shard"
"""The code of the one problem reported for a data shard that cannot be read; its tensors add none."""
_MISSING_SHARDS_LISTED = 64
"""Missing shards that hold no tensor are each reported only up to this many; beyond, one problem says how many."""
_PAIRWISE_SLICES = 256
"""Slices laid out other than along one axis are compared pair by pair only up to this many."""


@dataclass(frozen=True)
class BundleProblem:
    """One thing wrong with a bundle: the file at fault, the tensor if one is concerned, and what."""

    file: str
    key: str | None
    code: str
    """Stable kebab-case name of the kind of problem, e.g. `checksum-mismatch`."""
    message: str

    def __str__(self) -> str:
        if self.key is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}: {self.key}: {self.message}"


def unreadable_index(prefix: str | Path, error: ReaderError) -> BundleProblem:
    """The one problem reported for a bundle whose index `open_bundle` rejects."""
    index_path = str(prefix_file(location(prefix), ".index"))
    return BundleProblem(index_path, None, "unreadable-index", _without_path(str(error), index_path))


def _without_path(message: str, path: str) -> str:
    return message[len(path) + 2 :] if message.startswith(f"{path}: ") else message


@dataclass(frozen=True)
class _ChecksumJob:
    entry: BundleEntry
    label: str
    """The key, or `key[start:stop,...]` for a slice of a partitioned tensor."""


class Verifier:
    """Runs every check of `verify_bundle` over an opened bundle; see `Bundle.verify`."""

    def __init__(self, bundle: Bundle, workers: int | None) -> None:
        self.bundle = bundle
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.index = str(bundle.index_path)
        self._checksums = TensorChecksums(bundle.header.byte_order)

    def run(self) -> list[BundleProblem]:
        problems, jobs = self._check_layout()
        problems += self._check_checksums(jobs)
        return problems + self._check_object_graph(problems)

    def run_without_checksums(self) -> list[BundleProblem]:
        """Every problem except damaged tensor bytes: what the index says that the files do not bear out."""
        problems, _jobs = self._check_layout()
        return problems + self._check_object_graph(problems)

    def _check_layout(self) -> tuple[list[BundleProblem], list[_ChecksumJob]]:
        """Header, shard files, and where each entry lies; plus the checksum jobs of entries placed soundly."""
        problems = self._check_header() + self._check_shard_files()
        jobs: list[_ChecksumJob] = []
        for entry in self.bundle.entries.values():
            if entry.is_sliced:
                problems += self._check_slices(entry, jobs)
            else:
                problems += self._check_placement(entry, entry.key, jobs)
        return problems, jobs

    def _check_object_graph(self, problems: list[BundleProblem]) -> list[BundleProblem]:
        """A graph tensor whose bytes are intact yet do not decode; damaged bytes are reported already."""
        error = self.bundle.object_graph_error
        if error is None or any(problem.key == OBJECT_GRAPH_KEY for problem in problems):
            return []
        graph_entry = self.bundle.entries[OBJECT_GRAPH_KEY]
        shard = self.bundle.shard_path(graph_entry.shard_id)
        if self.bundle.shard_size(graph_entry.shard_id) is None or _reported_unreadable(shard, problems):
            return []
        message = _without_path(error, f"{shard}: {OBJECT_GRAPH_KEY}")
        return [self._problem(shard, OBJECT_GRAPH_KEY, "unreadable-object-graph", message)]

    def _problem(self, file: Path | str, key: str | None, code: str, message: str) -> BundleProblem:
        return BundleProblem(str(file), key, code, message)

    def _check_header(self) -> list[BundleProblem]:
        header = self.bundle.header
        problems = []
        if header.num_shards < 1:
            problems.append(
                self._problem(self.index, None, "bad-header", f"header declares {header.num_shards} data shards")
            )
        if header.min_consumer > SUPPORTED_BUNDLE_VERSION or SUPPORTED_BUNDLE_VERSION in header.bad_consumers:
            problems.append(
                self._problem(
                    self.index,
                    None,
                    "unsupported-version",
                    f"bundle version {header.producer} needs a reader of version {header.min_consumer} or later "
                    f"(this reader is version {SUPPORTED_BUNDLE_VERSION})",
                )
            )
        return problems

    def _check_shard_files(self) -> list[BundleProblem]:
        bundle = self.bundle
        declared = bundle.header.num_shards
        keys_by_shard: dict[int, list[str]] = {}
        for entry in bundle.entries.values():
            if not entry.is_sliced:
                keys_by_shard.setdefault(entry.shard_id, []).append(entry.key)
        for piece in bundle.slice_entries.values():
            keys_by_shard.setdefault(piece.shard_id, []).append(piece.key)
        problems = []
        present = set(bundle.present_shards())
        if declared > len(present) + len(keys_by_shard) + _MISSING_SHARDS_LISTED:
            # Checked before any loop over the declared count, which a damaged header makes 10^9.
            problems.append(
                self._problem(
                    self.index,
                    None,
                    "missing-shard",
                    f"header declares {declared} data shards, but only {len(present)} are on disk",
                )
            )
            candidates = sorted(shard_id for shard_id in keys_by_shard if 0 <= shard_id < declared)
        else:
            candidates = list(range(max(declared, 0)))
        for shard_id in candidates:
            if shard_id not in present:
                keys = keys_by_shard.get(shard_id, [])
                problems.append(
                    self._problem(
                        bundle.shard_path(shard_id),
                        keys[0] if keys else None,
                        "missing-shard",
                        f"data shard {shard_id} of {declared} is missing; it holds {len(keys)} tensors"
                        + (f" ({_first_names(keys)})" if keys else ""),
                    )
                )
        strays = self._stray_data_files(declared)
        for stray, (_shard_id, of) in strays.items():
            problems.append(
                self._problem(
                    stray,
                    None,
                    "unexpected-shard",
                    f"data file is not one of the {declared} shards the header of {self.index} declares"
                    + (f" (it is numbered as one of {of})" if of != declared else ""),
                )
            )
        counts_on_disk = {of for _shard_id, of in strays.values()} - {declared}
        if counts_on_disk:
            problems.append(
                self._problem(
                    self.index,
                    None,
                    "shard-count-mismatch",
                    f"header declares num_shards={declared}, but the data files on disk are numbered "
                    f"-of-{', -of-'.join(f'{count:05d}' for count in sorted(counts_on_disk))}",
                )
            )
        return problems

    def _stray_data_files(self, declared: int) -> dict[Path, tuple[int, int]]:
        directory, name = prefix_parts(self.bundle.prefix)
        strays = {}
        try:
            siblings = list(directory.iterdir())
        except OSError:
            return {}
        for path in siblings:
            match = TF_DATA_SHARD.search(path.name)
            if match is None or path.name[: match.start()] != name:
                continue
            shard_id, of = int(match.group(1)), int(match.group(2))
            if of != declared or shard_id >= declared:
                strays[path] = (shard_id, of)
        return dict(sorted(strays.items()))

    def _check_placement(self, entry: BundleEntry, label: str, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        bundle = self.bundle
        if not 0 <= entry.shard_id < bundle.header.num_shards:
            return [
                self._problem(
                    self.index,
                    label,
                    "bad-shard-id",
                    f"stored in shard {entry.shard_id}, but the header declares {bundle.header.num_shards} shards",
                )
            ]
        shard = bundle.shard_path(entry.shard_id)
        shard_size = bundle.shard_size(entry.shard_id)
        if entry.dtype.name.startswith("invalid") or entry.dtype.name == "resource":
            return [
                self._problem(self.index, label, "bad-dtype", f"dtype {entry.dtype.name} cannot be stored in a bundle")
            ]
        if entry.dtype.itemsize is not None and entry.size != entry.numel * entry.dtype.itemsize:
            return [
                self._problem(
                    self.index,
                    label,
                    "size-mismatch",
                    f"stored size {entry.size} bytes, but a {entry.dtype.name} tensor of shape "
                    f"{list(entry.shape)} takes {entry.numel * entry.dtype.itemsize}",
                )
            ]
        if entry.dtype.name == "string" and entry.size < entry.numel + 4:
            return [
                self._problem(
                    self.index,
                    label,
                    "size-mismatch",
                    f"stored size {entry.size} bytes is too small for {entry.numel} strings",
                )
            ]
        if shard_size is None:
            return []
        if entry.offset < 0 or entry.offset + entry.size > shard_size:
            return [
                self._problem(
                    shard,
                    label,
                    "out-of-range",
                    f"bytes {entry.offset}..{entry.offset + entry.size} lie outside the data file ({shard_size} bytes)",
                )
            ]
        jobs.append(_ChecksumJob(entry, label))
        return []

    def _check_slices(self, entry: BundleEntry, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        problems = []
        boxes: list[list[tuple[int, int]]] = []
        for tensor_slice in entry.slices:
            label = f"{entry.key}[{tensor_slice.spec(entry.shape)}]"
            piece, problem = self._find_slice(entry, tensor_slice, label)
            if problem is not None:
                problems.append(problem)
            if problem is None or problem.code != "bad-slice":
                boxes.append(tensor_slice.bounds(entry.shape))
            if piece is not None:
                problems += self._check_placement(piece, label, jobs)
        return problems + self._check_coverage(entry, boxes)

    def _find_slice(
        self, entry: BundleEntry, tensor_slice: TensorSlice, label: str
    ) -> tuple[BundleEntry | None, BundleProblem | None]:
        bounds = tensor_slice.bounds(entry.shape)
        fits = len(tensor_slice.extents) == len(entry.shape) and all(
            0 <= start <= stop <= size for (start, stop), size in zip(bounds, entry.shape)
        )
        if not fits:
            message = f"slice does not fit the full shape {list(entry.shape)}"
            return None, self._problem(self.index, label, "bad-slice", message)
        piece = self.bundle.slice_entries.get(encode_slice_key(entry.key, tensor_slice))
        if piece is None:
            return None, self._problem(self.index, label, "missing-slice", "the index has no entry for this slice")
        expected_shape = tuple(stop - start for start, stop in bounds)
        if piece.dtype != entry.dtype or piece.shape != expected_shape:
            found = f"{piece.dtype.name}{list(piece.shape)}"
            message = f"slice entry is {found}, expected {entry.dtype.name}{list(expected_shape)}"
            return None, self._problem(self.index, label, "slice-mismatch", message)
        return piece, None

    def _check_coverage(self, entry: BundleEntry, boxes: list[list[tuple[int, int]]]) -> list[BundleProblem]:
        overlap = _overlapping_pair(boxes)
        if overlap is None:
            message = f"{len(boxes)} slices not partitioned along one axis are too many to compare pair by pair"
            return [self._problem(self.index, entry.key, "slice-coverage", message)]
        if overlap:
            first, second = overlap
            message = f"slices [{_box_spec(first)}] and [{_box_spec(second)}] overlap"
            return [self._problem(self.index, entry.key, "slice-overlap", message)]
        covered = sum(prod(stop - start for start, stop in box) for box in boxes)
        if covered != entry.numel:
            return [
                self._problem(
                    self.index,
                    entry.key,
                    "slice-coverage",
                    f"slices cover {covered} of the {entry.numel} elements of shape {list(entry.shape)}",
                )
            ]
        return []

    def _check_checksums(self, jobs: list[_ChecksumJob]) -> list[BundleProblem]:
        if not jobs:
            return []
        descriptors: dict[int, Shard] = {}
        unreadable: dict[int, BundleProblem] = {}
        try:
            for shard_id in sorted({job.entry.shard_id for job in jobs}):
                try:
                    descriptors[shard_id] = open_shard(self.bundle.shard_path(shard_id))
                except OSError as exc:
                    unreadable[shard_id] = self._unreadable_shard(shard_id, exc)
            # Largest first, so one big tensor does not start last and leave the other threads idle.
            readable = (job for job in jobs if job.entry.shard_id in descriptors)
            ordered = sorted(readable, key=lambda job: job.entry.size, reverse=True)
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                outcomes = list(pool.map(lambda job: self._checksum_outcome(job, descriptors[job.entry.shard_id]), ordered))
        finally:
            for descriptor in descriptors.values():
                close_shard(descriptor)
        problems = []
        for job, outcome in zip(ordered, outcomes):
            if isinstance(outcome, OSError):
                # A read error is the shard's, not the tensor's: every other tensor there would repeat it.
                unreadable.setdefault(job.entry.shard_id, self._unreadable_shard(job.entry.shard_id, outcome))
            elif outcome is not None:
                problems.append(outcome)
        return list(unreadable.values()) + sorted(problems, key=lambda problem: problem.key or "")

    def _unreadable_shard(self, shard_id: int, error: OSError) -> BundleProblem:
        return self._problem(self.bundle.shard_path(shard_id), None, _UNREADABLE_SHARD, f"cannot read: {error.strerror}")

    def _checksum_outcome(self, job: _ChecksumJob, descriptor: Shard) -> BundleProblem | OSError | None:
        try:
            return self._check_checksum(job, descriptor)
        except OSError as exc:
            return exc

    def _check_checksum(self, job: _ChecksumJob, descriptor: Shard) -> BundleProblem | None:
        entry = job.entry
        shard = self.bundle.shard_path(entry.shard_id)
        try:
            crc = self._checksums.crc(entry, descriptor)
        except ContentError as exc:
            return self._problem(shard, job.label, exc.code, str(exc))
        if mask_crc(crc) != entry.crc32c:
            return self._problem(
                shard,
                job.label,
                "checksum-mismatch",
                f"checksum mismatch: stored crc32c {unmask_crc(entry.crc32c):08x}, computed {crc:08x} over bytes "
                f"{entry.offset}..{entry.offset + entry.size}",
            )
        return None


def _reported_unreadable(shard: Path, problems: list[BundleProblem]) -> bool:
    return any(problem.code == _UNREADABLE_SHARD and problem.file == str(shard) for problem in problems)


Box = list[tuple[int, int]]


def _overlapping_pair(boxes: list[Box]) -> tuple[Box, Box] | tuple[()] | None:
    """Two boxes that overlap, `()` when none do, or None when there are too many to tell cheaply.

    Slices that differ along one axis only (how TensorFlow partitions a variable) are sorted along
    it and compared with their neighbour: n log n. Other layouts are compared pair by pair, up to
    `_PAIRWISE_SLICES` of them.
    """
    boxes = [box for box in boxes if all(start < stop for start, stop in box)]  # empty ones cover nothing
    axes = {axis for first in boxes[:1] for box in boxes for axis, extent in enumerate(box) if extent != first[axis]}
    if len(axes) <= 1:
        axis = next(iter(axes), 0)
        ordered = sorted(boxes, key=lambda box: box[axis] if box else (0, 0))
        pairs: Iterable[tuple[Box, Box]] = zip(ordered, ordered[1:])
    elif len(boxes) <= _PAIRWISE_SLICES:
        pairs = itertools.combinations(boxes, 2)
    else:
        return None
    for first, second in pairs:
        if all(max(a0, b0) < min(a1, b1) for (a0, a1), (b0, b1) in zip(first, second)):
            return first, second
    return ()


def _box_spec(box: list[tuple[int, int]]) -> str:
    return ",".join(f"{start}:{stop}" for start, stop in box)


def _first_names(keys: Sequence[str], shown: int = 3) -> str:
    names = ", ".join(repr(key) for key in keys[:shown])
    return names + (", ..." if len(keys) > shown else "")
