"""Safety: nothing in the checkpoint or its manifest can run code or reach outside its directory."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._storage import Location, RemotePath
from .._exceptions import AmbiguousArchiveError, ReaderError
from ._context import Context
from ._registry import REDIRECTS, Finding, declare
from .._views.base import CheckpointView
from .containers import check as container_dangers
from .inputs import CheckpointUnreadable
from .pickles import DangerousPickleGlobal, pickle_dangers
from .programs import program_present

if TYPE_CHECKING:
    from .._models import Manifest

__all__ = [
    "AmbiguousArchive",
    "ManifestPathEscapes",
    "SymlinkEscapes",
    "check",
    "link_escape",
    "unreadable_finding",
]


REDIRECTS["CKS402"] = DangerousPickleGlobal.code  # unknown-pickle-global: off the allow-list is dangerous


@declare("CKS403", "manifest-path-escapes", family="safety", severity="error")
class ManifestPathEscapes:
    """## What it does
    Checks that every path in the manifest (`checkpoint`, `files[].path`) is relative and stays
    inside the manifest's directory.

    ## Why is this bad?
    A manifest naming `../../etc/passwd` or an absolute path makes every tool that trusts it read,
    hash, copy or delete files outside the checkpoint, e.g. a registry moving "the checkpoint's
    files" into storage.

    ## Example
    ```yaml
    files:
      - {path: ../../home/user/.ssh/id_rsa, size: 411}
    ```

    ## How to fix
    Manifests name files relative to their own directory; write it again with `ckptspec manifest`.
    """


@declare("CKS404", "symlink-escapes", family="safety", severity="error")
class SymlinkEscapes:
    """## What it does
    Checks that no file of the checkpoint, no file the manifest lists, and not the manifest itself
    is a symbolic link that points outside the checkpoint's directory. Such a manifest is not read.
    `audit DIR` reports the same of every link under `DIR` (to a file or a directory, through a
    chain of links) that leads out of `DIR`, and reads nothing behind it, also with
    `--follow-symlinks`; and of a checkpoint that a link swapped in before or while it was judged
    leads out.

    ## Why is this bad?
    A link to another place makes the registry store, hash and later serve a file nobody reviewed,
    and the checkpoint changes when that file changes. Links within the directory (Lightning's
    `last.ckpt` with `save_last="link"`) are fine.

    ## Example
    `last.ckpt -> /mnt/shared/other-run/epoch=9.ckpt`; `uploads/7/weights -> /home/alice/models`.

    ## How to fix
    Copy the file into the checkpoint's directory instead of linking to it.
    """


@declare("CKS410", "ambiguous-archive", family="safety", severity="error")
class AmbiguousArchive:
    """## What it does
    Reports a torch zip archive that two zip readers can read differently; it is not read further.
    Refused layouts: bytes before, between or after the records; records that overlap; two records
    whose names are equal or differ only in case; a name with a NUL byte; an end record or Zip64
    locator pointing elsewhere than the central directory before it; local headers that disagree
    with the directory; compressed records (torch inflates them, ckptspec judges bytes as stored).

    ## Why is this bad?
    torch.save never writes such an archive. An attacker does, to show a scanner a harmless
    `data.pkl` while `torch.load` unpickles another one that runs code.

    ## Example
    A `.ckpt` holding two central directories, whose Zip64 locator points at the end record of the
    first: Python's `zipfile` reads the directory right before the locator (a harmless `data.pkl`),
    torch's reader the one the locator names (a `data.pkl` that calls `os.system`).

    ## How to fix
    Do not load the file. Find where it came from; re-create the checkpoint with `torch.save`.
    """


def unreadable_finding(error: ReaderError, checkpoint: str, file: str) -> Finding:
    """The finding for a checkpoint the reader refused: an ambiguous archive is a safety error
    (CKS410), anything else a checkpoint that cannot be read (CKS001)."""
    rule = AmbiguousArchive if isinstance(error, AmbiguousArchiveError) else CheckpointUnreadable
    return rule.finding(str(error), checkpoint=checkpoint, file=file)


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.view is not None:
        yield from pickle_dangers(ctx, ctx.view.globals, ctx.view.path, _naming(ctx.view))
        yield from container_dangers(ctx)
        yield from program_present(ctx)
    if ctx.manifest is not None:
        yield from _manifest_paths(ctx, ctx.manifest)
    yield from _symlinks(ctx)


def _naming(view: CheckpointView) -> str:
    """What names the classes a load would import: a Keras archive's config.json, a legacy `.h5` model
    save's `model_config` attribute (Keras tells the two by suffix too), else the pickle."""
    if view.format != "keras":
        return "pickle"
    return "config.json" if view.path.suffix == ".keras" else "model_config"


def _escapes(base: Location, relative: str) -> bool:
    """Whether the name leaves `base`; where symbolic links lead is `_symlinks`' business."""
    return Path(relative).is_absolute() or inside(base, relative) is None


def inside(base: Location, relative: str) -> Location | None:
    """`base/relative`, or None when its name leaves `base` (the safety checks report those); where
    symbolic links lead is `_symlinks`' business."""
    if isinstance(base, RemotePath):
        remote = base / relative
        return remote if remote.is_relative_to(base) else None
    return _local_inside(base, relative)


@functools.lru_cache(maxsize=1024)
def _local_inside(base: Path, relative: str) -> Path | None:
    # From the names alone, no file looked at: each check of a checkpoint asks again for the same few.
    candidate = Path(os.path.normpath(base / relative))
    return candidate if candidate.is_relative_to(os.path.normpath(base)) else None


def _manifest_paths(ctx: Context, manifest: Manifest) -> Iterator[Finding]:
    named = [(("checkpoint",), manifest.checkpoint)] + [(("files", i, "path"), f.path) for i, f in enumerate(manifest.files)]
    for where, relative in named:
        if _escapes(ctx.base, relative):
            yield ctx.finding(
                ManifestPathEscapes,
                f"{relative}: leaves the manifest's directory {ctx.base}",
                file=ctx.manifest_path,
                path=where,
            )


def _symlinks(ctx: Context) -> Iterator[Finding]:
    candidates = set(ctx.view.files if ctx.view is not None else [ctx.checkpoint])
    if ctx.manifest is not None:
        candidates |= {ctx.base / entry.path for entry in ctx.manifest.files if not Path(entry.path).is_absolute()}
    for path in sorted(candidates):
        escape = link_escape(path, ctx.base)
        if escape is not None:
            yield ctx.finding(SymlinkEscapes, escape, file=path)


def link_escape(path: Path, base: Path) -> str | None:
    """What is wrong when `path` is a symbolic link that leads out of the directory `base`, by
    itself or through a chain of links, else None."""
    if not path.is_symlink():
        return None
    # realpath, unlike Path.resolve, does not raise on a loop of links.
    target, inside = Path(os.path.realpath(path)), Path(os.path.realpath(base))
    return None if target.is_relative_to(inside) else f"{path.name}: links to {target}, outside {inside}"
