"""Containers of pickles: every pickle inside judged and named by member, and a container that
cannot be opened, or only past ckptspec's bounds, refused with the reason named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ._context import Context
from ._registry import Finding, declare
from .pickles import pickle_dangers

__all__ = ["ContainerBoundsExceeded", "ContainerNotInspectable", "ContainerPickleUnreadable", "check"]


@declare("CKS405", "container-not-inspectable", family="safety", severity="error")
class ContainerNotInspectable:
    """## What it does
    Reports a container a loader unpickles from that ckptspec cannot open, judged unsafe.

    Such are a 7z archive, an lz4 or zstd stream (no reader in the core install), an encrypted zip
    member, a compression method Python's `zipfile` lacks, a damaged archive or stream, and a `.npy`
    header NumPy would not read (or one longer than `NPY_HEADER_LIMIT`).

    ## Why is this bad?
    What cannot be opened cannot be judged, and a loader that can open it runs the pickles inside:
    the container is judged unsafe, not skipped and not called "no checkpoint".

    ## Example
    `weights.7z: cannot be inspected: 7z archive (no reader in ckptspec's core install); judged unsafe`.

    ## How to fix
    Ship the checkpoint itself, not an archive of it, in a format ckptspec judges (a torch zip
    archive, safetensors, a TensorFlow bundle), or an archive ckptspec opens (zip, gzip, bz2, xz).
    """


@declare("CKS406", "container-bounds-exceeded", family="safety", severity="error")
class ContainerBoundsExceeded:
    """## What it does
    Reports a container that holds more than ckptspec opens; it is judged unsafe.

    The caps: more members than `MEMBER_COUNT_LIMIT` (65 536), a member whose pickle inflates past
    `MEMBER_BYTES_LIMIT` (64 MiB), more than `INFLATED_LIMIT` (128 MiB) inflated in all, containers
    nested deeper than `NESTING_LIMIT` (4), or a member that claims to inflate more than deflate can
    (`RATIO_LIMIT`, 1 100 times). They are fixed; no count or size the file states decides how much is read.

    ## Why is this bad?
    Such a file is a decompression bomb or built to exhaust a scanner; the part past the cap is not
    judged, so the whole is judged unsafe.

    ## Example
    `bomb.zip!x.pkl: holds more than 67108864 bytes to judge, more than ckptspec reads of one member; judged unsafe`.

    ## How to fix
    Do not load the file. A real checkpoint is saved as a torch archive or safetensors, not as
    pickles packed in archives.
    """


@declare("CKS407", "container-pickle-unreadable", family="safety", severity="error")
class ContainerPickleUnreadable:
    """## What it does
    Reports a pickle inside a container (`a.npz!arr_0.npy`, `b.zip!model/x.pkl`) that does not read to its end.

    An opcode that does not decode, a truncation, a tuple nested too deep: every dangerous global
    the pickle named before the stop is reported too (CKS401).

    ## Why is this bad?
    The loader reads the same bytes as far as they go and runs what they call on the way; what lies
    past the stop was never judged.

    ## Example
    `a.zip!model/x.pkl cannot be read: opcode 0xff at byte 40 is no pickle opcode`.

    ## How to fix
    Do not load the file; re-create it from its source.
    """


def check(ctx: Context) -> Iterator[Finding]:
    """The findings of a container view: per member its dangers and where its pickle stopped, then
    why the rest of the container could not be judged."""
    container = ctx.view.container if ctx.view is not None else None
    if container is None:
        return
    for member in container.members:
        if member.problem is not None:
            yield ctx.finding(ContainerPickleUnreadable, member.problem, file=Path(member.name))
        yield from pickle_dangers(ctx, member.globals, Path(member.name), f"{member.name}: pickle")
    if container.refusal is not None:
        rule = ContainerBoundsExceeded if container.refusal_kind == "bounds" else ContainerNotInspectable
        yield ctx.finding(rule, container.refusal, file=container.refused_at or container.path)
