"""What the torch adapters write beside a checkpoint after its manifest: the exported program, then
the signature (which covers it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..signing import sign_at_save
from ._torch_export import export_program

__all__ = ["write_sidecars"]


def write_sidecars(
    checkpoint: Path, *, model: torch.nn.Module, fingerprint: Any, export: bool, signing_key: str | os.PathLike[str] | None
) -> None:
    """Export the program (when asked), then sign the checkpoint, its manifest and the program (when a key is given)."""
    if export:
        export_program(model, fingerprint, checkpoint)
    sign_at_save(checkpoint, signing_key)
