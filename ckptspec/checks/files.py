"""Integrity of the checkpoint's files: each file the manifest lists is on disk with the size and
digests it records, each file the checkpoint consists of is listed, every TensorFlow data shard has
its index, and no interrupted save left temporary files beside the checkpoint."""

from __future__ import annotations

import fnmatch
import functools
import glob
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._storage import resolved
from .._scan import Algorithm, FileDigests, file_digests
from ._context import Context
from ._registry import Finding, declare
from .safety import inside, link_escape
from .._views.base import CheckpointView

if TYPE_CHECKING:
    from .._models import FileEntry, Manifest, Spec

__all__ = [
    "ChecksumNotRecorded",
    "FileDigestMismatch",
    "FileMissing",
    "FileNotRecorded",
    "FileSizeMismatch",
    "IndexMissing",
    "PartialSaveLeftover",
    "check_leftovers",
    "check_recorded_files",
    "check_unrecorded_files",
    "leftovers_of",
    "recorded_digests",
]


@declare("CKS201", "file-missing", family="integrity", severity="error")
class FileMissing:
    """## What it does
    Checks that every file listed in the manifest's `files:` exists.

    ## Why is this bad?
    A checkpoint is often several files (a TensorFlow index and its data shards). One that was not
    copied, uploaded or synced makes the checkpoint unusable, usually discovered only at resume.

    ## Example
    ```yaml
    files:
      - {path: ckpt-3.data-00001-of-00002, size: 1048576, sha256: ...}   # not on disk
    ```

    ## How to fix
    Copy the missing file from where the checkpoint was written, or discard the checkpoint.
    """


@declare("CKS202", "file-size-mismatch", family="integrity", severity="error")
class FileSizeMismatch:
    """## What it does
    Checks that every file listed in the manifest has the size the manifest records.

    ## Why is this bad?
    A different size means a truncated copy, an interrupted upload, or a file overwritten after the
    manifest was written; the checkpoint is not the one the manifest describes.

    ## Example
    ```yaml
    files:
      - {path: epoch=3-step=900.ckpt, size: 10485760}   # 4194304 bytes on disk
    ```

    ## How to fix
    Copy the file again from its source, or write a new manifest if the file was changed on purpose.
    """


@declare("CKS203", "file-digest-mismatch", family="integrity", severity="error")
class FileDigestMismatch:
    """## What it does
    Checks each listed file's digests (CRC32C, SHA-256) against the ones the manifest records.

    ## Why is this bad?
    Same size, different bytes: bit rot, a partial overwrite, or a file edited after the fact. Every
    tensor and value in it is suspect.

    ## Example
    ```yaml
    files:
      - {path: last.ckpt, size: 4096, crc32c: 9f86d0e1}   # the file's CRC32C is 2c26b4a0
    ```

    ## How to fix
    Restore the file from a good copy. The tensor findings of the same run name what changed.
    """


@declare("CKS212", "index-missing", family="integrity", severity="error")
class IndexMissing:
    """## What it does
    Reports TensorFlow data shards (`PREFIX.data-NNNNN-of-NNNNN`) whose `PREFIX.index` is missing.

    ## Why is this bad?
    TensorFlow writes the index last: data without an index is a save that was interrupted, or an
    index lost in a copy. Nothing in the shards can be restored without it.

    ## Example
    `ckpt-5.data-00000-of-00001` with no `ckpt-5.index`.

    ## How to fix
    Delete the partial save and use the previous checkpoint, or copy the index from the source.
    """


@declare("CKS213", "partial-save-leftover", family="integrity", severity="warning")
class PartialSaveLeftover:
    """## What it does
    Looks beside the checkpoint for the temporary files writers leave when a save is interrupted:
    TensorFlow's `*.tempstate*` files and `PREFIX_temp/` directories, and `*.tmp` files of atomic
    writers.

    ## Why is this bad?
    A leftover shows that a save of this checkpoint was interrupted at least once; the files may
    come from the interrupted attempt, and the leftovers waste space.

    ## Example
    `ckpt-3.index.tempstate1234567890` beside `ckpt-3.index`.

    ## How to fix
    Verify the checkpoint (this run does) and delete the leftovers.
    """


@declare("CKS214", "file-not-recorded", family="integrity", severity="warning")
class FileNotRecorded:
    """## What it does
    Checks that every file the checkpoint consists of is listed in the manifest's `files:`.

    ## Why is this bad?
    An unlisted file is not covered by size and digest checks, so its damage goes unnoticed.

    ## Example
    The bundle has `ckpt-1.data-00000-of-00001`; the manifest lists only `ckpt-1.index`.

    ## How to fix
    Write the manifest again (the adapters and `ckptspec manifest` list every file).
    """


@declare("CKS215", "checksum-not-recorded", family="integrity", severity="warning")
class ChecksumNotRecorded:
    """## What it does
    Checks that the manifest records what the spec's `integrity:` asks for: a CRC32C per tensor
    (`tensor_checksum: crc32c`) and the whole-file digest it names (`file_digest: crc32c` or `sha256`).

    ## Why is this bad?
    Without the recorded checksum, damage to those bytes cannot be detected.

    ## Example
    ```yaml
    tensors:
      - {name: l.weight, dtype: float32, shape: [4, 4]}   # no crc32c
    ```

    ## How to fix
    Write the manifest with a ckptspec adapter or `ckptspec manifest`, which record both.
    """


def recorded_digests(manifest: Manifest | None, spec: Spec | None, base: Path) -> dict[Path, FileDigests]:
    """The file digests validation compares, by resolved path: every one the manifest records (an
    old manifest's SHA-256 under a spec that asks for CRC32C too), none when the spec turns them off."""
    if manifest is None or (spec is not None and spec.integrity.file_digest == "none"):
        return {}
    digests = {}
    for entry in manifest.files:
        path = inside(base, entry.path)
        if path is not None:
            digests[resolved(path)] = FileDigests(crc32c=entry.crc32c, sha256=entry.sha256)
    return digests


def check_recorded_files(ctx: Context, manifest: Manifest) -> Iterator[Finding]:
    recorded = recorded_digests(manifest, ctx.spec, ctx.base)
    for index, entry in enumerate(manifest.files):
        path = inside(ctx.base, entry.path)
        if path is not None:
            yield from _file(ctx, entry, path, ("files", index), recorded.get(resolved(path), FileDigests()))


def _file(ctx: Context, entry: FileEntry, path: Path, where: tuple[str | int, ...], recorded: FileDigests) -> Iterator[Finding]:
    if link_escape(path, ctx.base) is not None:
        return  # a link out of the checkpoint's directory (the safety checks report it): its target is never read
    if not path.is_file():
        yield ctx.finding(FileMissing, f"{entry.path}: recorded in the manifest, not on disk", file=path, path=where)
        return
    size = path.stat().st_size
    if size != entry.size:
        yield ctx.finding(
            FileSizeMismatch,
            f"{entry.path}: {size} bytes on disk, {entry.size} recorded (truncated or overwritten)",
            file=path,
            path=(*where, "size"),
        )
        return
    asked = ctx.spec.integrity.file_digest if ctx.spec is not None else "none"
    # SHA-256 answers a request for CRC32C too: it finds every change CRC32C finds.
    if asked != "none" and entry.sha256 is None and (asked == "sha256" or entry.crc32c is None):
        yield ctx.finding(ChecksumNotRecorded, f"{entry.path}: no {asked} recorded", file=path, path=where)
    if not recorded.algorithms:
        return
    try:
        actual = _digests_of(ctx, path, recorded.algorithms)
    except OSError as exc:
        yield ctx.not_checked(FileDigestMismatch, f"{entry.path}: cannot read: {exc.strerror or exc}", file=path, path=where)
        return
    for algorithm in recorded.algorithms:
        stored, expected = getattr(actual, algorithm), getattr(recorded, algorithm)
        if stored != expected:
            yield ctx.finding(
                FileDigestMismatch,
                f"{entry.path}: {algorithm} {stored[:12]}… on disk, {expected[:12]}… recorded",
                file=path,
                path=(*where, algorithm),
            )


def _digests_of(ctx: Context, path: Path, algorithms: tuple[Algorithm, ...]) -> FileDigests:
    """The digests the reader computed while it read the file, or else one pass over it now."""
    read = ctx.view.digests.get(resolved(path)) if ctx.view is not None else None
    if read is not None and set(algorithms) <= set(read.algorithms):
        return read
    return file_digests(path, algorithms)


def check_unrecorded_files(ctx: Context, manifest: Manifest, view: CheckpointView) -> Iterator[Finding]:
    recorded = {resolved(ctx.base / entry.path) for entry in manifest.files}
    for path in view.files:
        if resolved(path) not in recorded:
            yield ctx.finding(FileNotRecorded, f"{path.name}: part of the checkpoint, not in the manifest's files", file=path, path=("files",))


def leftovers_of(checkpoint: Path) -> list[Path]:
    """Temporary files an interrupted save of `checkpoint` (a file or TF prefix) leaves beside it,
    from one listing of its directory."""
    try:
        beside = list(checkpoint.parent.iterdir())
    except OSError:
        return []
    left = _leftover_names(checkpoint.name)
    return sorted(path for path in beside if left.match(path.name))


@functools.lru_cache(maxsize=256)
def _leftover_names(name: str) -> re.Pattern[str]:
    """The names an interrupted save of a checkpoint named `name` leaves, as one pattern: a directory
    of many checkpoints lists many names for each."""
    name = glob.escape(name)
    patterns = (f"{name}.*tempstate*", f"{name}.tempstate*", f"{name}_temp", f"{name}.tmp", f"{name}.*.tmp", f".{name}.*.tmp")
    return re.compile("|".join(fnmatch.translate(pattern) for pattern in patterns))


def check_leftovers(ctx: Context) -> Iterator[Finding]:
    for path in leftovers_of(ctx.checkpoint):
        yield ctx.finding(PartialSaveLeftover, f"{path.name}: left by an interrupted save", file=path)
