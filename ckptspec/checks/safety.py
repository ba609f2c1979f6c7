"""Safety: nothing in the checkpoint or its manifest can run code or reach outside its directory."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from .._storage import Location, RemotePath
from .._exceptions import AmbiguousArchiveError, ReaderError
from .._models import Manifest
from ..formats import GlobalRef
from ._context import Context
from ._registry import REDIRECTS, Finding, declare
from .._views.base import CheckpointView
from .containers import check as container_dangers
from .framework_records import framework_record_findings
from .inputs import CheckpointUnreadable
from .programs import program_present

__all__ = [
    "AmbiguousArchive",
    "DangerousPickleGlobal",
    "ManifestPathEscapes",
    "SymlinkEscapes",
    "check",
    "link_escape",
    "pickle_dangers",
    "tree_escape",
    "unreadable_finding",
]


@declare("CKS401", "dangerous-pickle-global", family="safety", severity="error")
class DangerousPickleGlobal:
    """## What it does
    Reports every pickle global off ckptspec's allow-list that the operator's spec does not allow by
    its exact name. The allow-list holds inert builders only: tensor and storage rebuilders, dtypes,
    `OrderedDict`, NumPy arrays, Lightning and OmegaConf containers. It counts the globals of pickles hidden inside the pickle (bytes handed to `pickle.loads` or
    `torch.storage._load_from_bytes`) and those named before a pickle that stops reading stopped.

    ## Why is this bad?
    `torch.load(weights_only=False)`, and anything built on it, imports each global's module and
    calls it while unpickling. Off the allow-list that is code nobody reviewed: `os.system`, but
    also `pydoc.pipepager`, `logging.config.listen`, `torch.fx` graph code or a project's own class.
    A deny-list of known gadgets is always one module short, so anything off the list is an error.

    ## Example
    A `.ckpt` whose `data.pkl` holds `GLOBAL 'posix system'` + `REDUCE` with `('curl … | sh',)`,
    or a hyper-parameter object `myproject.config.TrainConfig`.

    ## How to fix
    Do not load the file. If it comes from your own training code and names your own classes, save
    plain types instead, or have the operator's spec (`--spec`) trust each class by its exact name:
    `pickle: {allow: ["myproject.config.TrainConfig"]}`. A manifest's own spec cannot allow globals.
    """


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


def pickle_dangers(ctx: Context, globals_named: Iterable[GlobalRef], file: Path, naming: str = "pickle") -> Iterator[Finding]:
    """A CKS401 finding for each dangerous global in `globals_named` that the spec of `ctx` does not
    allow by its exact name (the judging spec is always the operator's; see `_validate`); `naming`
    is what names them (a pickle, or a Keras archive's config.json)."""
    allowed = frozenset(ctx.spec.pickle.allow) if ctx.spec is not None else frozenset()
    files = ctx.view.global_files if ctx.view is not None else {}
    records = [used for used in globals_named if used.safety == "framework-record" and used.qualname not in allowed]
    yield from framework_record_findings(ctx, records, {used.qualname: files.get(used.qualname, file) for used in records}, naming)
    for used in globals_named:
        if used.safety == "dangerous" and used.qualname not in allowed:
            named_in = files.get(used.qualname, file)
            where = f"{_relative(named_in, file)}: " if named_in != file else ""
            yield ctx.finding(
                DangerousPickleGlobal,
                f"{where}{naming} names {used.qualname} ({used.count}×), which is not on the allow-list: loading it runs that code"
                f" (to trust it, list it under pickle.allow in the spec passed with --spec)",
                file=named_in,
            )


def _relative(path: Path, checkpoint: Path) -> str:
    """`path` as messages name it: below the checkpoint's directory where it lies there."""
    try:
        return str(path.relative_to(checkpoint))
    except ValueError:
        return str(path)


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
    """What is wrong when `path` is a symbolic link that leads out of the directory `base`, else None."""
    return tree_escape(path, base) if path.is_symlink() else None


def tree_escape(path: Path, base: Path) -> str | None:
    """What is wrong when `path` resolves out of the directory `base`: through a link of its own, a
    chain of them, or a directory on the way that is one; else None."""
    # realpath, unlike Path.resolve, does not raise on a loop of links.
    target, inside = Path(os.path.realpath(path)), Path(os.path.realpath(base))
    return None if target.is_relative_to(inside) else f"{path.name}: links to {target}, outside {inside}"
