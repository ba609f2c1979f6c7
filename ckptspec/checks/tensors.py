"""Integrity of what the checkpoint stores: every tensor of a recorded inventory (model, EMA) is there
with the dtype, shape and CRC32C the manifest records, and no unrecorded one is among them; and the
damage the format reader's own verification found (stored checksums, shards, structure)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._exceptions import CkptspecError
from .._pointer import join_pointer, split_pointer
from ._context import Context
from ._registry import Finding, Rule, declare
from .._views.base import CheckpointView, TensorInfo
from .files import ChecksumNotRecorded
from .sharded import SHARD_PROBLEM_RULES

if TYPE_CHECKING:
    from .._models import Manifest, Spec, TensorInventory

__all__ = [
    "CheckpointCorrupt",
    "ShardMissing",
    "StoredChecksumMismatch",
    "TensorChecksumMismatch",
    "TensorDtypeMismatch",
    "TensorMissing",
    "TensorShapeMismatch",
    "TensorUnexpected",
    "check_inventories",
    "checksummed_tensors",
    "reader_problems",
]


@declare("CKS204", "tensor-missing", family="integrity", severity="error")
class TensorMissing:
    """## What it does
    Checks that every tensor in the manifest's inventories (model, EMA) exists in the checkpoint at
    its recorded place.

    ## Why is this bad?
    A missing tensor is either a failed load later (strict) or, with a non-strict or shape-filtering
    loader, a layer that silently keeps its fresh initialisation.

    ## Example
    The manifest lists `head.weight` under `/state_dict`; the file's state dict has no such key.

    ## How to fix
    Find out what removed the tensor (a filtering save, a renamed module) and save again.
    """


@declare("CKS205", "tensor-dtype-mismatch", family="integrity", severity="error")
class TensorDtypeMismatch:
    """## What it does
    Checks that every tensor in the checkpoint has the dtype the manifest records.

    ## Why is this bad?
    A tensor cast after the manifest was written (e.g. to half precision) loses precision, and a
    restore casts it back without telling anyone.

    ## Example
    The manifest says `float32`, the file stores `float16`.

    ## How to fix
    Save the checkpoint again from the original tensors, or write a new manifest for the cast file.
    """


@declare("CKS206", "tensor-shape-mismatch", family="integrity", severity="error")
class TensorShapeMismatch:
    """## What it does
    Checks that every tensor in the checkpoint has the shape the manifest records.

    ## Why is this bad?
    A different shape means a different model (a resized head, another vocabulary). Shape-filtering
    loaders skip such tensors silently and the layer keeps its random initialisation.

    ## Example
    The manifest says `head.weight` is `[10, 64]`, the file holds `[12, 64]`.

    ## How to fix
    Make sure the checkpoint and the manifest belong together; write the manifest again from the
    model that produced the file.
    """


@declare("CKS207", "tensor-checksum-mismatch", family="integrity", severity="error")
class TensorChecksumMismatch:
    """## What it does
    Checks each tensor's CRC32C, computed over its bytes as stored, against the manifest. A tensor
    whose chunks lie in several files of a sharded checkpoint is reported against each file holding
    a chunk that fails its own checksum (the CRC-32 torch.save stores for its record), or against
    the checkpoint's directory when none does, since the file then cannot be told.

    ## Why is this bad?
    A flipped bit in a weight loads without any error and changes the model's outputs, sometimes
    only on rare inputs. The checksum names the exact tensor that changed.

    ## Example
    `/state_dict/l1.weight: crc32c 5e6f7a8b in the file, 1a2b3c4d recorded`; for a sharded tensor,
    `/model/2.weight: crc32c 491cac04 in the file, f4732dfc recorded; changed: rank 1 file
    __1_0.distcp bytes 13133..15222: record archive/data/0: checksum mismatch: ...`.

    ## How to fix
    Restore the checkpoint from a good copy; a tensor cannot be repaired in place.
    """


@declare("CKS208", "tensor-unexpected", family="integrity", severity="error")
class TensorUnexpected:
    """## What it does
    Checks that the checkpoint holds no tensor, inside a recorded inventory, that the manifest does
    not list.

    ## Why is this bad?
    An extra tensor means the file was written by another model or edited afterwards; strict loads
    fail on it and non-strict loads ignore it silently.

    ## Example
    The file's state dict has `head.bias`; the manifest's model inventory has no such tensor.

    ## How to fix
    Write the manifest again from the model that produced the file, or find what added the tensor.
    """


@declare("CKS209", "stored-checksum-mismatch", family="integrity", severity="error")
class StoredChecksumMismatch:
    """## What it does
    Verifies the checksums a format stores itself: TensorFlow bundle entries' CRC32C, and the
    CRC-32 of each record of a torch.save archive.

    A bundle entry's masked CRC32C is checked against the bytes in its data shard (strings and
    variants by TensorFlow's own rules). A torch record's CRC-32 is the one its zip directory
    records: `validate` checks every record that no manifest CRC32C covers (`data.pkl`,
    `byteorder`, optimizer state, ...), so no byte is read twice and none is left unchecked;
    `ckptspec manifest`, with nothing else to trust, checks every record.

    ## Why is this bad?
    TensorFlow only notices a bad checksum when that tensor is restored, and `torch.load` never
    checks the CRC-32: a flipped byte in a pickled float or string loads as a different value. A
    registry that accepts the file ships a corrupt model or configuration.

    ## Example
    `ckpt-1.data-00000-of-00001: model/dense/kernel: checksum mismatch`;
    `last.ckpt: record archive/data.pkl: checksum mismatch: stored crc32 0f70ff96, computed 5e6f7a8b
    over bytes 64..9512`.

    ## How to fix
    Restore the data shard or the file from a good copy.
    """


@declare("CKS210", "shard-missing", family="integrity", severity="error")
class ShardMissing:
    """## What it does
    Checks that a sharded checkpoint is complete: every data shard its header declares exists, no
    stray shard with another count lies beside it, and every slice of a partitioned tensor is there.

    ## Why is this bad?
    A bundle with a missing shard cannot restore the tensors stored in it; a stray shard from an
    interrupted save with another shard count shows that two saves were mixed.

    ## Example
    `ckpt-4.data-00001-of-00002` is missing while the index declares two shards.

    ## How to fix
    Copy the missing shard, or discard the checkpoint and use the previous one.
    """


@declare("CKS211", "checkpoint-corrupt", family="integrity", severity="error")
class CheckpointCorrupt:
    """## What it does
    Reports damage the format reader found in the checkpoint's structure: entries pointing past the
    end of a data file, sizes that do not fit the dtype and shape, unreadable object graphs.

    ## Why is this bad?
    A restore either fails on these tensors or reads garbage into them.

    ## Example
    `ckpt-2.index: model/w: bytes 0..4096 lie past the end of the data file`.

    ## How to fix
    Restore the checkpoint from a good copy.
    """


_INVENTORIES = ("model", "ema")


def checksummed_tensors(manifest: Manifest | None, spec: Spec | None) -> set[str]:
    """Pointers of the tensors whose CRC32C the integrity checks compare with the manifest."""
    if manifest is None or not _wants_crc(spec):
        return set()
    inventories = (getattr(manifest.components, name) for name in _INVENTORIES)
    return {
        inventory.at + join_pointer([entry.name])
        for inventory in inventories
        if inventory is not None
        for entry in inventory.tensors
        if entry.crc32c is not None
    }


def _wants_crc(spec: Spec | None) -> bool:
    return spec is None or spec.integrity.tensor_checksum == "crc32c"


def check_inventories(ctx: Context, manifest: Manifest, view: CheckpointView) -> Iterator[Finding]:
    want_crc = _wants_crc(ctx.spec)
    for name in _INVENTORIES:
        inventory = getattr(manifest.components, name)
        if inventory is not None:
            where = ("components", name, "tensors")
            yield from _inventory(ctx, view, inventory, name, where, want_crc)


def _inventory(
    ctx: Context,
    view: CheckpointView,
    inventory: TensorInventory,
    component: str,
    where: tuple[str | int, ...],
    want_crc: bool,
) -> Iterator[Finding]:
    unchecksummed = 0
    for index, entry in enumerate(inventory.tensors):
        pointer = inventory.at + join_pointer([entry.name])
        tensor = view.tensors.get(pointer)
        if tensor is None:
            yield ctx.finding(TensorMissing, f"{pointer}: in the manifest, not in the checkpoint", file=view.path, pointer=pointer, path=(*where, index))
            continue
        yield from _tensor_mismatch(ctx, TensorDtypeMismatch, tensor, "dtype", tensor.dtype, entry.dtype, (*where, index))
        yield from _tensor_mismatch(ctx, TensorShapeMismatch, tensor, "shape", list(tensor.shape), entry.shape, (*where, index))
        if entry.crc32c is None:
            unchecksummed += 1
            continue
        if not want_crc:
            continue
        try:
            actual = tensor.crc32c()
        except CkptspecError as exc:
            yield ctx.finding(CheckpointCorrupt, f"{pointer}: bytes cannot be read: {exc}", file=tensor.file, pointer=pointer, path=(*where, index))
            continue
        if actual != entry.crc32c:
            yield from _checksum_mismatch(ctx, tensor, actual, entry.crc32c, (*where, index, "crc32c"))
    if unchecksummed and want_crc and ctx.spec is not None:
        yield ctx.finding(
            ChecksumNotRecorded,
            f"{unchecksummed} of {len(inventory.tensors)} {component} tensors have no crc32c recorded",
            file=ctx.manifest_path,
            path=where,
        )
    recorded = {inventory.at + join_pointer([entry.name]) for entry in inventory.tensors}
    for pointer, tensor in _members(view, inventory.at).items():
        if pointer not in recorded:
            yield ctx.finding(TensorUnexpected, f"{pointer}: in the checkpoint, not in the manifest", file=tensor.file, pointer=pointer, path=where)


def _tensor_mismatch(
    ctx: Context, rule: Rule, tensor: TensorInfo, field: str, stored: Any, recorded: Any, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    """A finding when the tensor's `field` in the file is not the one the manifest's entry (at `where`) records."""
    if stored != recorded:
        yield ctx.finding(
            rule,
            f"{tensor.pointer}: {field} {stored} in the file, {recorded} recorded",
            file=tensor.file,
            pointer=tensor.pointer,
            path=(*where, field),
        )


def _checksum_mismatch(ctx: Context, tensor: TensorInfo, stored: str, recorded: str, where: tuple[str | int, ...]) -> Iterator[Finding]:
    """CKS207, naming the file at fault: for a tensor whose parts lie in several files, one finding
    for each file holding a part that fails its own checksum, or the directory when none does."""
    message = f"{tensor.pointer}: crc32c {stored} in the file, {recorded} recorded"
    damaged: dict[Path, list[str]] = {}
    for file, place in tensor.locate_damage() if tensor.locate_damage is not None else []:
        damaged.setdefault(file, []).append(place)
    for file, places in damaged.items():
        yield ctx.finding(TensorChecksumMismatch, f"{message}; changed: {'; '.join(places)}", file=file, pointer=tensor.pointer, path=where)
    if not damaged:
        unlocated = "; its parts lie in several files and none fails a checksum of its own" if tensor.locate_damage is not None else ""
        yield ctx.finding(TensorChecksumMismatch, f"{message}{unlocated}", file=tensor.file, pointer=tensor.pointer, path=where)


def _members(view: CheckpointView, at: str) -> dict[str, TensorInfo]:
    """The tensors that belong to an inventory recorded at `at`, by pointer."""
    if view.format == "tf-bundle":
        return {pointer: tensor for pointer, tensor in view.tensors.items() if pointer.startswith(at + "/")}
    return {at + join_pointer([name]): tensor for name, tensor in view.tensors_below(at).items()}


_SHARD_PROBLEMS = {"missing-shard", "unexpected-shard", "shard-count-mismatch", "missing-slice", "bad-shard-id"}


def reader_problems(ctx: Context, view: CheckpointView) -> Iterator[Finding]:
    """The damage the format reader's own verification found, one finding per problem."""
    for problem in view.problems:
        if problem.kind in SHARD_PROBLEM_RULES:
            rule = SHARD_PROBLEM_RULES[problem.kind]
        elif problem.kind == "checksum-mismatch":
            rule = StoredChecksumMismatch
        elif problem.kind in _SHARD_PROBLEMS:
            rule = ShardMissing
        else:
            rule = CheckpointCorrupt
        where = f"{'/'.join(split_pointer(problem.pointer))}: " if problem.pointer else ""
        yield ctx.finding(rule, f"{problem.file.name}: {where}{problem.message}", file=problem.file, pointer=problem.pointer)
