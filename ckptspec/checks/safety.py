"""Safety: nothing in the checkpoint or its manifest can run code or reach outside its directory."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path

from .._exceptions import AmbiguousArchiveError, ReaderError
from .._models import Manifest
from ._context import Context
from .inputs import CheckpointUnreadable
from ._registry import Finding, declare
from ._view import CheckpointView
from .programs import program_present

__all__ = [
    "AmbiguousArchive",
    "DangerousPickleGlobal",
    "ManifestPathEscapes",
    "SymlinkEscapes",
    "UnknownPickleGlobal",
    "check",
    "dangerous_globals",
    "link_escape",
    "unreadable_finding",
]


@declare("CKS401", "dangerous-pickle-global", family="safety", severity="error")
class DangerousPickleGlobal:
    """## What it does
    Reports every global in the checkpoint's pickle that can run code, touch files or processes, or
    import modules (`os.system`, `builtins.eval`, `subprocess.Popen`, `pickle.loads`, ...). Always an
    error, whatever the spec's pickle policy says.

    ## Why is this bad?
    `torch.load(weights_only=False)` (and anything built on it) calls these while unpickling: loading
    the checkpoint runs the attacker's command. ckptspec reads the pickle without calling anything.

    ## Example
    A `.ckpt` whose `data.pkl` holds `GLOBAL 'posix system'` + `REDUCE` with `('curl … | sh',)`.

    ## How to fix
    Do not load the file. Find where it came from; re-create the checkpoint from a trusted run.
    """


@declare("CKS402", "unknown-pickle-global", family="safety", severity="error")
class UnknownPickleGlobal:
    """## What it does
    Reports globals in the checkpoint's pickle outside ckptspec's allow-list (tensor rebuilders,
    storages, `OrderedDict`, NumPy RNG state, ...) and outside the spec's `pickle.allow` patterns.
    The severity follows the spec's `pickle.unknown_globals`: error, warning, or allow (no finding).

    ## Why is this bad?
    An unknown class is code that `torch.load(weights_only=False)` imports and calls. It may be
    harmless (an OmegaConf container, a dataclass of hyper-parameters), but it makes the checkpoint
    unloadable with `weights_only=True` and needs the project's code to be trusted.

    ## Example
    `omegaconf.dictconfig.DictConfig` in a Lightning checkpoint whose hyper-parameters are an
    OmegaConf config.

    ## How to fix
    Save plain types (dicts, lists, numbers) instead, or list the trusted globals in the spec:
    `pickle: {allow: ["omegaconf.*"]}`.
    """


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

    ## Why is this bad?
    A link to another place makes the registry store, hash and later serve a file nobody reviewed,
    and the checkpoint changes when that file changes. Links within the directory (Lightning's
    `last.ckpt` with `save_last="link"`) are fine.

    ## Example
    `last.ckpt -> /mnt/shared/other-run/epoch=9.ckpt`.

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
        yield from dangerous_globals(ctx, ctx.view)
        yield from _unknown_globals(ctx, ctx.view)
        yield from program_present(ctx)
    if ctx.manifest is not None:
        yield from _manifest_paths(ctx, ctx.manifest)
    yield from _symlinks(ctx)


def dangerous_globals(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    for used in view.globals:
        if used.safety == "dangerous":
            yield ctx.finding(
                DangerousPickleGlobal,
                f"{_naming(view)} names {used.qualname} ({used.count}×), which can run code when loaded",
                file=view.path,
            )


def _unknown_globals(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    policy = ctx.spec.pickle if ctx.spec is not None else None
    for used in view.globals:
        if used.safety == "unknown":
            if policy is not None and (
                policy.unknown_globals == "allow" or any(fnmatch.fnmatchcase(used.qualname, p) for p in policy.allow)
            ):
                continue
            yield ctx.finding(
                UnknownPickleGlobal,
                f"{_naming(view)} names {used.qualname} ({used.count}×), outside the allow-list",
                file=view.path,
                severity=policy.unknown_globals if policy is not None else None,  # type: ignore[arg-type]
            )


def _naming(view: CheckpointView) -> str:
    """What names the classes a load would import: a Keras archive's config.json, else the pickle."""
    return "config.json" if view.format == "keras" else "pickle"


def _escapes(base: Path, relative: str) -> bool:
    """Whether the name leaves `base`; where symbolic links lead is `_symlinks`' business."""
    if Path(relative).is_absolute():
        return True
    return not Path(os.path.normpath(base / relative)).is_relative_to(os.path.normpath(base))


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
    if not path.is_symlink():
        return None
    # realpath, unlike Path.resolve, does not raise on a loop of links.
    target, inside = Path(os.path.realpath(path)), Path(os.path.realpath(base))
    return None if target.is_relative_to(inside) else f"{path.name}: links to {target}, outside {inside}"
