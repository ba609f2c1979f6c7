"""Next-batch identity: the batches a run draws after a save, recorded beside the checkpoint, and
the batches a resume from it draws, checked against them. Framework-free: the adapters hand in
each batch's digest and, where the loader shows them, its sample indices.

A save's record is written once the run has drawn its next K batches (`<checkpoint>.next-batches-<rank>.json`);
the checkpoint and its manifest are never rewritten. A resume matches its first K batches against
it, or, where the resumed loop draws the epoch from its start and skips what was already trained
on, the K batches from the position the save was made at. The first batch that can match neither is
a `RestoreError`; a resume with no record to match reports that the data order was not checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from .._dataclass import dataclass
from .._atomic import atomic_write_bytes
from .._sidecars import checkpoint_of_manifest, manifest_path_for, next_batches_path_for
from .._exceptions import RestoreError, WriteError
from .._filetypes import special_file_kind

__all__ = ["BatchDrawn", "BatchesDrawn", "DataOrderCheck", "LoaderShape", "Recorder", "data_order_check", "judged_together", "trained_on"]

_FORMAT = "ckptspec.next-batches"
_VERSION = 1
_MAX_RECORD_BYTES = 1 << 20
_log = logging.getLogger("ckptspec")


@dataclass(frozen=True)
class BatchDrawn:
    crc32c: str
    indices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LoaderShape:
    """What a loader showed at the save: its dataset's length (None where unsized), and how many
    batches of the epoch under way had been drawn."""

    samples: int | None
    drawn_in_epoch: int


@dataclass
class BatchesDrawn:
    """The batches drawn after one save, until there are `wanted` of them; then written beside it."""

    checkpoint: Path
    manifest_sha256: str
    rank: int
    shape: LoaderShape
    wanted: int
    batches: list[BatchDrawn] = field(default_factory=list)

    def add(self, batch: BatchDrawn) -> bool:
        """Note one more batch; True once the record is complete and written."""
        self.batches.append(batch)
        if len(self.batches) < self.wanted:
            return False
        self._write()
        return True

    def _write(self) -> None:
        try:
            current = hashlib.sha256(manifest_path_for(self.checkpoint).read_bytes()).hexdigest()
        except OSError:
            return  # the checkpoint is gone: nothing to describe
        if current != self.manifest_sha256:
            return  # a later save replaced it: these batches followed the one before
        record = {
            "format": _FORMAT,
            "version": _VERSION,
            "checkpoint": self.checkpoint.name,
            "manifest_sha256": self.manifest_sha256,
            "rank": self.rank,
            "loader": {"samples": self.shape.samples, "drawn_in_epoch": self.shape.drawn_in_epoch},
            "batches": [{"crc32c": item.crc32c, "indices": list(item.indices) if item.indices is not None else None} for item in self.batches],
        }
        try:
            atomic_write_bytes(next_batches_path_for(self.checkpoint, self.rank), json.dumps(record, separators=(",", ":")).encode(), durable=False)
        except WriteError as exc:  # the training goes on; a resume from this checkpoint reports its data order unchecked
            _log.warning("%s", exc)


class Recorder:
    """The records still waiting for batches, of every save made with one loader."""

    def __init__(self) -> None:
        self._open: list[BatchesDrawn] = []

    def expect(self, drawn: BatchesDrawn) -> None:
        self._open = [item for item in self._open if item.checkpoint != drawn.checkpoint]
        if drawn.wanted > 0:
            self._open.append(drawn)

    @property
    def waiting(self) -> bool:
        return bool(self._open)

    def drawn(self, batch: BatchDrawn) -> None:
        self._open = [item for item in self._open if not item.add(batch)]


@dataclass
class DataOrderCheck:
    """The resume's batches against those the run drew after the save. `status`: `pending` until
    enough batches are drawn, then `matched`, or `differs` (raised as `RestoreError` at the batch
    that decided it); `unchecked` when there is nothing to check against (`reason` says why)."""

    checkpoint: Path
    rank: int
    status: Literal["pending", "matched", "differs", "unchecked"]
    reason: str = ""
    expected: Sequence[BatchDrawn] = ()
    starts: tuple[int, ...] = (0,)
    """Where the record's first batch may fall among the batches drawn after the resume: at once, or
    after the batches of the epoch that the resumed loop draws again and skips."""
    drawn: int = 0
    _misses: dict[int, str] = field(default_factory=dict)

    def check(self, batch: BatchDrawn) -> None:
        if self.status != "pending":
            return
        position, self.drawn = self.drawn, self.drawn + 1
        for start in self.starts:
            offset = position - start
            if start in self._misses or not 0 <= offset < len(self.expected):
                continue
            if self.expected[offset] != batch:
                self._misses[start] = _difference(position, offset, self.expected[offset], batch)
            elif offset == len(self.expected) - 1:
                self.status = "matched"
                _log.info("%s: rank %d drew the %d batches the run drew after the save", self.checkpoint, self.rank, len(self.expected))
                return
        if len(self._misses) == len(self.starts):
            self.status = "differs"
            counted = [f"counted from the save's place in its epoch ({start} batches in), {self._misses[start]}" for start in self.starts[1:]]
            raise RestoreError(
                f"{self.checkpoint}: data order: the resumed run (rank {self.rank}) does not draw the batches the run drew after "
                f"this save: {'; '.join([self._misses[0], *counted])}"
            )


def _difference(position: int, offset: int, expected: BatchDrawn, batch: BatchDrawn) -> str:
    said = f"batch {position} after the resume is not batch {offset} after the save (CRC32C {batch.crc32c}, {expected.crc32c} in the run)"
    if expected.indices is None or batch.indices is None:
        return said
    first = next((i for i, (a, b) in enumerate(zip(batch.indices, expected.indices)) if a != b), None)
    if first is not None:
        return f"{said}: its sample {first} is index {batch.indices[first]}, {expected.indices[first]} in the run"
    if len(batch.indices) != len(expected.indices):
        return f"{said}: it holds {len(batch.indices)} samples, {len(expected.indices)} in the run"
    return f"{said}: the same sample indices with other content (the dataset's items changed)"


def trained_on(check: DataOrderCheck | None, recorder: Recorder, batch: BatchDrawn) -> DataOrderCheck | None:
    """A batch about to be trained on: checked against the run's after a resume (`RestoreError`
    before the first optimizer step on a batch the run did not draw), then recorded after a save;
    returns the check while it is still pending."""
    if check is not None:
        check.check(batch)
    recorder.drawn(batch)
    return check if check is not None and check.status == "pending" else None


def judged_together(judge: Callable[[], None], pending: Callable[[], DataOrderCheck | None], gather: Callable[[Any], list[Any]]) -> bool:
    """`judge` the batch this rank is about to train on, then learn every rank's verdict through
    `gather`: every rank raises when one refuses, since a rank left to train alone would wait in the
    next collective forever. True while a rank's check (`pending()` on this one) is still pending."""
    try:
        judge()
        own = None
    except RestoreError as exc:
        own = exc
    verdicts = gather((str(own) if own is not None else None, pending() is not None))
    if own is not None:
        raise own
    refused = [why for why, _ in verdicts if why is not None]
    if refused:
        raise RestoreError(f"another rank refused the resume: {refused[0]}")
    return any(still for _, still in verdicts)


def data_order_check(checkpoint: Path, manifest: Path, rank: int, shape: LoaderShape | None) -> DataOrderCheck:
    """The check of a resume from `checkpoint` (described by `manifest`) on a loader of `shape` (None:
    not told); `RestoreError` at once when the loader's dataset holds another number of samples
    than at the save. The record lies beside the checkpoint the manifest describes (a link's target)."""
    path = next_batches_path_for(checkpoint_of_manifest(manifest), rank)
    record = _read(path)
    if isinstance(record, str):
        return DataOrderCheck(checkpoint, rank, "unchecked", record)
    if record["manifest_sha256"] != hashlib.sha256(manifest.read_bytes()).hexdigest():
        return DataOrderCheck(checkpoint, rank, "unchecked", f"{path.name} describes an earlier save at this path")
    saved = record["loader"]
    if shape is not None and None not in (saved["samples"], shape.samples) and shape.samples != saved["samples"]:
        raise RestoreError(
            f"{checkpoint}: data order: the loader's dataset holds {shape.samples} samples, {saved['samples']} when the run "
            "saved it: the resume would not draw the batches the run drew"
        )
    expected = [BatchDrawn(item["crc32c"], tuple(item["indices"]) if item["indices"] is not None else None) for item in record["batches"]]
    starts = (0, saved["drawn_in_epoch"]) if saved["drawn_in_epoch"] else (0,)
    return DataOrderCheck(checkpoint, rank, "pending", expected=expected, starts=starts)


def _read(path: Path) -> dict[str, Any] | str:
    """The record at `path`, or why there is none to check against; judged by its type and size
    before it is opened (a FIFO would wait for a writer forever)."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise RestoreError(f"{path}: not a regular file but {special_file_kind(status.st_mode)}; a record of the batches drawn after a save is a JSON file")
        if status.st_size > _MAX_RECORD_BYTES:
            raise RestoreError(f"{path}: {status.st_size} bytes, more than the {_MAX_RECORD_BYTES} of any record of the batches drawn after a save; it was not read")
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_RECORD_BYTES + 1)  # it may have grown since
    except FileNotFoundError:
        return f"no record of the batches drawn after it was saved ({path.name}: the run stopped within a few batches of the save, or did not watch its batches, as a plain-torch save without loader= does not)"
    except OSError as exc:
        raise RestoreError(f"{path}: cannot read the record of the batches drawn after the save: {exc.strerror or exc}") from None
    try:
        record = json.loads(raw) if len(raw) <= _MAX_RECORD_BYTES else None
        _require_shape(record)
    except RecursionError:
        raise RestoreError(f"{path}: not a record of the batches drawn after a save: nested too deeply") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise RestoreError(f"{path}: not a record of the batches drawn after a save: {exc}") from None
    return record


def _require_shape(record: Any) -> None:
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise ValueError(f"no {_FORMAT!r} document")
    if record.get("version") != _VERSION:
        raise ValueError(f"version {record.get('version')!r}, this ckptspec reads {_VERSION}")
    loader, batches = record["loader"], record["batches"]
    if not isinstance(record["manifest_sha256"], str) or not isinstance(loader, dict) or not isinstance(batches, list) or not batches:
        raise TypeError("manifest_sha256, loader or batches has the wrong type, or no batch is listed")
    if not (loader["samples"] is None or _is_count(loader["samples"])) or not _is_count(loader["drawn_in_epoch"]):
        raise TypeError("the loader's counts are not counts")
    if loader["samples"] is not None and loader["drawn_in_epoch"] > loader["samples"]:
        raise ValueError(f"{loader['drawn_in_epoch']} batches drawn in an epoch of {loader['samples']} samples")
    for item in batches:
        if not isinstance(item, dict) or not isinstance(item["crc32c"], str):
            raise TypeError("a batch without its CRC32C")
        if item["indices"] is not None and not (isinstance(item["indices"], list) and all(_is_count(i) for i in item["indices"])):
            raise TypeError("a batch's indices are not sample indices")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
