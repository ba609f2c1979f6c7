"""Integrity: the files and tensors are the ones the manifest recorded, byte for byte.

The family's rules live by what they judge: `files` (the files the manifest lists, and what an
interrupted save left beside them), `tensors` (the recorded tensors, and what the format reader's
own verification found), `sharded` (checkpoints saved by many ranks), `programs` (a TorchScript
program) and `signature` (verified by `ckptspec.signing`). `check` runs the checks of a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

from ._context import Context
from ._registry import Finding
from .files import check_leftovers, check_recorded_files, check_unrecorded_files
from .programs import program_changes
from .sharded import check_rank_states
from .tensors import check_inventories, reader_problems

__all__ = ["check"]


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.view is not None:
        yield from reader_problems(ctx, ctx.view)
    if ctx.manifest is not None:
        yield from check_recorded_files(ctx, ctx.manifest)
        if ctx.view is not None:
            yield from check_unrecorded_files(ctx, ctx.manifest, ctx.view)
            yield from check_inventories(ctx, ctx.manifest, ctx.view)
            yield from check_rank_states(ctx, ctx.manifest, ctx.view)
            yield from program_changes(ctx)
    yield from check_leftovers(ctx)
