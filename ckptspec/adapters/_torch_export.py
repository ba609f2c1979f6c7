"""Export the model's program beside a checkpoint, with the fixed batch as its example input, so a
registry can replay the fingerprint without the training code (`ckptspec validate --replay`)."""

from __future__ import annotations

from pathlib import Path

import torch

from .._atomic import atomic_file
from .._exceptions import AdapterError
from ..formats.torch_export import program_path_for
from ._torch_replay import FingerprintState, evaluating

__all__ = ["export_program"]


def export_program(model: torch.nn.Module, fingerprint: FingerprintState | None, checkpoint: Path) -> Path:
    """Write `<checkpoint>.pt2`: `torch.export` of `model` in eval mode on the fixed batch, atomically."""
    if fingerprint is None:
        raise AdapterError(f"{checkpoint}: exporting the program needs fingerprint_batch (it is the program's example input)")
    args, kwargs = tuple(fingerprint["args"]), dict(fingerprint["kwargs"])
    try:
        with evaluating(model):
            program = torch.export.export(model, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many kinds for models it cannot trace
        raise AdapterError(f"{checkpoint}: torch.export cannot export the model on the fixed batch: {type(exc).__name__}: {exc}") from None
    target = program_path_for(checkpoint)
    with atomic_file(target, durable=False) as handle:
        torch.export.save(program, handle)
    return target
