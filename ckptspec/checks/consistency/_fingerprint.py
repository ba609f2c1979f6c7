"""The recorded fingerprint's tensors are stored, with the recorded dtype, shape and digest."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..._exceptions import ReaderError
from ..._pointer import join_pointer
from .._context import Context
from .._registry import Finding, declare
from ..._views.base import CheckpointView, TensorInfo

if TYPE_CHECKING:
    from ..._models import Manifest, TensorDigest

__all__ = ["FingerprintDigestMismatch", "FingerprintTensorMissing", "check_fingerprint"]


@declare("CKS315", "fingerprint-tensor-missing", family="consistency", severity="error")
class FingerprintTensorMissing:
    """## What it does
    Checks that every input and output tensor of the recorded fingerprint is stored in the checkpoint
    with the recorded dtype and shape.

    ## Why is this bad?
    The fingerprint (a fixed batch and the outputs the saved model gave on it) is what proves after a
    restore that the model computes what it computed when saved. Without its tensors, no restore can
    replay it.

    ## Example
    The manifest lists output `output`; nothing is stored at `/ckptspec/fingerprint/outputs/output`.

    ## How to fix
    Save through a ckptspec adapter with a fingerprint batch.
    """


@declare("CKS316", "fingerprint-digest-mismatch", family="consistency", severity="error")
class FingerprintDigestMismatch:
    """## What it does
    Checks the SHA-256 of every stored fingerprint tensor against the digest in the manifest.

    ## Why is this bad?
    A changed fixed batch or changed reference outputs make the replay after a restore compare
    against the wrong numbers.

    ## Example
    `outputs: [{name: output, sha256: 3a7b…}]`; the stored tensor hashes to `9c1d…`.

    ## How to fix
    Restore the checkpoint from a good copy.
    """


def check_fingerprint(ctx: Context, view: CheckpointView, manifest: Manifest) -> Iterator[Finding]:
    record = manifest.components.fingerprint
    if record is None:
        return
    for kind, digests in (("inputs", record.inputs), ("outputs", record.outputs)):
        for index, digest in enumerate(digests):
            tensor = _fingerprint_tensor(view, record.at, kind, digest.name)
            yield from _check_digest(ctx, view, record.at, kind, digest, tensor, ("components", "fingerprint", kind, index))


def _check_digest(
    ctx: Context, view: CheckpointView, at: str, kind: str, digest: TensorDigest, tensor: TensorInfo | None, where: tuple[str | int, ...]
) -> Iterator[Finding]:
    label = f"fingerprint {kind[:-1]} {digest.name}"
    if tensor is None or tensor.dtype != digest.dtype or list(tensor.shape) != digest.shape:
        found = "nothing" if tensor is None else f"{tensor.dtype}{list(tensor.shape)}"
        yield ctx.finding(
            FingerprintTensorMissing,
            f"{label}: {digest.dtype}{digest.shape} recorded, {found} stored",
            file=view.path,
            pointer=tensor.pointer if tensor is not None else at,
            path=where,
        )
        return
    try:
        stored = tensor.sha256()
    except ReaderError as exc:
        yield ctx.not_checked(FingerprintDigestMismatch, str(exc), file=tensor.file, pointer=tensor.pointer, path=(*where, "sha256"))
        return
    if stored != digest.sha256:
        yield ctx.finding(
            FingerprintDigestMismatch,
            f"{label}: stored tensor does not hash to the recorded sha256",
            file=tensor.file,
            pointer=tensor.pointer,
            path=(*where, "sha256"),
        )


def _fingerprint_tensor(view: CheckpointView, at: str, kind: str, name: str) -> TensorInfo | None:
    """Where a fingerprint tensor is stored: a key of its own (TensorFlow), or, in the torch
    adapters' layout, `args/N` and `kwargs/K` for inputs and `outputs/NAME` for outputs."""
    candidates = [at + join_pointer([name])]
    if kind == "inputs":
        candidates.append(at + join_pointer(name.split(".", 1)))
    else:
        candidates.append(at + join_pointer(["outputs", name]))
    return next((view.tensors[c] for c in candidates if c in view.tensors), None)
