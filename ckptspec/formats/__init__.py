"""Readers of real checkpoint files. None of them imports torch, tensorflow or numpy."""

from ._inspection import (
    INSPECTION_FORMAT_VERSION,
    CheckpointFormat,
    ComponentSummary,
    FileSummary,
    GlobalRef,
    Inspection,
    TensorSummary,
)

__all__ = [
    "INSPECTION_FORMAT_VERSION",
    "CheckpointFormat",
    "ComponentSummary",
    "FileSummary",
    "GlobalRef",
    "Inspection",
    "TensorSummary",
]
