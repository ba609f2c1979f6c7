"""What the torch adapters write beside a checkpoint after its manifest: the exported program and
the signature, and what they remove with the checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .._documents import manifest_path_for
from ..formats.torch_export import program_path_for
from ._torch_export import export_program

__all__ = ["SIGNING_KEY_VARIABLE", "remove_sidecars", "write_sidecars"]

SIGNING_KEY_VARIABLE = "CKPTSPEC_SIGNING_KEY"
"""Environment variable naming the private key the adapters sign with when no `signing_key` is given."""


def write_sidecars(
    checkpoint: Path, *, model: torch.nn.Module, fingerprint: Any, export: bool, signing_key: str | os.PathLike[str] | None
) -> None:
    """Export the program (when asked), then sign the checkpoint, its manifest and the program (when a key is given)."""
    if export:
        export_program(model, fingerprint, checkpoint)
    key = signing_key if signing_key is not None else os.environ.get(SIGNING_KEY_VARIABLE)
    if key:
        from ..signing import sign

        sign(checkpoint, private_key=key)


def remove_sidecars(checkpoint: Path) -> None:
    """Remove the manifest, program and signature of a checkpoint that is being replaced or removed."""
    from ..signing import signature_path_for

    for path in (manifest_path_for(checkpoint), program_path_for(checkpoint), signature_path_for(checkpoint)):
        if os.path.lexists(path):
            path.unlink()
