"""One summary shape for every checkpoint format: what `ckptspec inspect` prints.

Readers build an `Inspection`; the CLI renders it as text or as JSON. The JSON form is documented in
docs/inspect.md and versioned by `INSPECTION_FORMAT_VERSION`: keys are only ever added.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import field
from typing import Any, Literal

from .._dataclass import dataclass
from .._pickle_policy import Safety

__all__ = [
    "INSPECTION_FORMAT_VERSION",
    "CheckpointFormat",
    "ComponentSummary",
    "FileSummary",
    "GlobalRef",
    "Inspection",
    "TensorSummary",
]

INSPECTION_FORMAT_VERSION = 1

CheckpointFormat = Literal["torch", "lightning", "tf-bundle", "pickle", "safetensors", "torchscript", "keras", "dcp", "deepspeed", "hf-trainer", "accelerate", "archive"]


@dataclass(frozen=True)
class FileSummary:
    path: str
    size: int


@dataclass(frozen=True)
class TensorSummary:
    key: str
    """JSON Pointer of the tensor in the checkpoint's object tree (TF: '/' + escaped bundle key)."""
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    component: str | None = None
    """ckptspec component the tensor belongs to (model, optimizer, ...), when the reader can tell."""


@dataclass(frozen=True)
class GlobalRef:
    """A class or function the checkpoint's pickle names, and how safe it is to have."""

    module: str
    name: str
    safety: Safety
    count: int = 1

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class ComponentSummary:
    name: str
    at: str
    tensor_count: int
    nbytes: int
    dtypes: dict[str, int]


@dataclass
class Inspection:
    path: str
    format: CheckpointFormat
    files: list[FileSummary]
    tensors: list[TensorSummary]
    globals: list[GlobalRef] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    """Scalars a reader can tell without model code: framework version, epoch, global step, ..."""
    components: dict[str, str] = field(default_factory=dict)
    """Component name → JSON Pointer where the reader found it."""

    def component_summaries(self) -> list[ComponentSummary]:
        summaries = []
        for name, at in self.components.items():
            members = [t for t in self.tensors if t.component == name]
            summaries.append(
                ComponentSummary(
                    name=name,
                    at=at,
                    tensor_count=len(members),
                    nbytes=sum(t.nbytes for t in members),
                    dtypes=dict(Counter(t.dtype for t in members)),
                )
            )
        return summaries

    def to_json(self, *, include_tensors: bool = False) -> dict[str, Any]:
        document: dict[str, Any] = {
            "inspection": INSPECTION_FORMAT_VERSION,
            "path": self.path,
            "format": self.format,
            "files": [{"path": f.path, "size": f.size} for f in self.files],
            "metadata": self.metadata,
            "summary": {
                "tensor_count": len(self.tensors),
                "nbytes": sum(t.nbytes for t in self.tensors),
                "dtypes": dict(Counter(t.dtype for t in self.tensors)),
            },
            "components": [
                {
                    "name": c.name,
                    "at": c.at,
                    "tensor_count": c.tensor_count,
                    "nbytes": c.nbytes,
                    "dtypes": c.dtypes,
                }
                for c in self.component_summaries()
            ],
            "globals": [
                {"module": g.module, "name": g.name, "safety": g.safety, "count": g.count} for g in self.globals
            ],
        }
        if include_tensors:
            document["tensors"] = [
                {
                    "key": t.key,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "nbytes": t.nbytes,
                    "component": t.component,
                }
                for t in self.tensors
            ]
        return document
