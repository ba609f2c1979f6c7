"""One view of any checkpoint for the checks: its object tree, its tensors, pickle globals, files and
the problems its reader found. This is the only module of `ckptspec.checks` that knows the readers.

Torch and Lightning files give the unpickled tree with a tensor reference at each tensor. A TensorFlow
bundle gives the flat mapping of bundle keys, as the manifest's `at` pointers expect; a pointer that
names no key but is a prefix of keys (`/optimizer`) resolves to the mapping of the keys below it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._pointer import split_pointer
from .._scan import FileDigests
from .._storage import resolved
from ..formats import CheckpointFormat, GlobalRef
from ..formats._io import unreadable

if TYPE_CHECKING:
    from ..formats.containers import Container
    from ..formats.dcp import KnownSave
    from ..formats.detect import DetectedCheckpoint
    from ..formats.keras import LayerConfig
    from ..formats.lightning import FitProgress
    from ..formats.torchscript import Program

__all__ = [
    "MISSING",
    "CheckpointView",
    "Problem",
    "TensorInfo",
    "open_view",
]

_Read = TypeVar("_Read")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""What `resolve` returns for a pointer that names nothing (None is a value a checkpoint may hold)."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as stored: its type and shape from the file's structure, its bytes only on demand."""

    pointer: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    component: str | None = None
    """The component the reader attributes the tensor to (TensorFlow object graph roles), if it can tell."""
    role: str | None = None
    """The reader's finer role, e.g. TensorFlow's `optimizer_slot`."""
    layout: Hashable | None = None
    """Where and how the tensor's elements are stored; two tensors with equal layouts are one tensor
    saved under two names (tied weights), where the reader can tell."""
    read_crc32c: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    read_sha256: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    read_scalar: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    """The value of a one-element tensor, where the reader can decode it."""
    locate_damage: Callable[[], list[tuple[Path, str]]] | None = field(default=None, compare=False, repr=False)
    """For a tensor whose parts lie in several files (`file` is then the checkpoint's directory):
    `(file, where in it)` of each part that fails a checksum of its own, read when its CRC32C did not match."""

    def crc32c(self) -> str:
        """Unmasked CRC32C of the bytes as stored, 8 lowercase hex digits.

        Like `sha256` and `scalar`, raises `ReaderError` when the bytes cannot be read."""
        if self.read_crc32c is None:
            raise NotImplementedError(f"{self.pointer}: the reader cannot checksum this tensor")
        return self._read(self.read_crc32c)

    def sha256(self) -> str:
        if self.read_sha256 is None:
            raise NotImplementedError(f"{self.pointer}: the reader cannot digest this tensor")
        return self._read(self.read_sha256)

    def scalar(self) -> Any:
        """The value of a one-element tensor; only where `read_scalar` is set."""
        if self.read_scalar is None:
            raise NotImplementedError(f"{self.pointer}: the reader cannot decode this tensor")
        return self._read(self.read_scalar)

    def _read(self, read: Callable[[], _Read]) -> _Read:
        try:
            return read()
        except OSError as exc:
            raise unreadable(self.file, exc, item=self.pointer) from None


@dataclass(frozen=True)
class Problem:
    """Something the reader's own verification found wrong with the bytes."""

    kind: str
    """The reader's kebab-case name for it, e.g. `checksum-mismatch`, `missing-shard`."""
    file: Path
    message: str
    pointer: str | None = None


@dataclass
class CheckpointView:
    path: Path
    """The checkpoint file, or the TensorFlow prefix."""
    format: CheckpointFormat
    tree: Any
    tensors: dict[str, TensorInfo]
    """JSON Pointer → tensor, for every tensor in the checkpoint."""
    files: list[Path]
    globals: list[GlobalRef] = field(default_factory=list)
    global_files: dict[str, Path] = field(default_factory=dict)
    """For a checkpoint of several pickled files: the first file naming each global, by qualified name."""
    problems: list[Problem] = field(default_factory=list)
    digests: dict[Path, FileDigests] = field(default_factory=dict)
    """Digests of files the reader read whole while opening, by resolved path (see `open_view`)."""
    roles_unknown: str | None = None
    """Why no tensor has a `component` or `role`, when the reader could not tell them (a TensorFlow
    bundle whose object graph cannot be read); checks that need them report that they could not check."""
    layers: list[LayerConfig] | None = None
    """Construction config the file itself holds (a `.keras` archive's config.json), model first."""
    closer: Callable[[], None] | None = field(default=None, repr=False)
    program: Program | None = None
    """A TorchScript archive's program: its code files and their digest."""
    container: Container | None = None
    """A container's pickles, judged member by member (`globals` is empty then: each member names its own)."""

    def __enter__(self) -> CheckpointView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the files the tensors read their bytes through."""
        if self.closer is not None:
            self.closer()

    def resolve(self, pointer: str) -> Any:
        """The value at `pointer`, or `MISSING`."""
        if self.format == "tf-bundle":
            return self._resolve_flat(pointer)
        from ..formats.torchzip import resolve_pointer

        try:
            return resolve_pointer(self.tree, pointer)
        except KeyError:
            return MISSING

    def fit_progress(self) -> FitProgress | None:
        """A Lightning checkpoint's loop counters as its reader reads them; None for other checkpoints."""
        from ..formats.lightning import LightningCheckpoint

        checkpoint = LightningCheckpoint.recognise(self.tree) if self.format == "lightning" else None
        return checkpoint.fit_progress if checkpoint is not None else None

    def tensors_below(self, pointer: str) -> dict[str, TensorInfo]:
        """Tensors that are direct members of the mapping at `pointer`, by their key there."""
        prefix = pointer + "/"
        found = {}
        for key, tensor in self.tensors.items():
            if key.startswith(prefix) and "/" not in key[len(prefix) :]:
                found[split_pointer(key)[-1]] = tensor
        return found

    def _resolve_flat(self, pointer: str) -> Any:
        if pointer == "":
            return self.tree
        key = "/".join(split_pointer(pointer))
        if key in self.tree:
            return self.tree[key]
        below = {name[len(key) + 1 :]: value for name, value in self.tree.items() if name.startswith(key + "/")}
        return below or MISSING


def open_view(
    path: Path | DetectedCheckpoint,
    *,
    trusted_tensors: Collection[str] = (),
    recorded: Mapping[Path, FileDigests] | None = None,
    verify_slices: bool = True,
    known_save: KnownSave | None = None,
) -> CheckpointView:
    """Read the checkpoint at `path` (file, TensorFlow prefix, DCP or DeepSpeed directory, or directory
    holding one) into a view.

    Raises a `ReaderError` when nothing at `path` is a checkpoint ckptspec reads, or a file of it
    cannot be read; structural damage found while reading is raised too, damage to bytes is listed in
    `problems`. Every checksum a format stores is verified, except that a torch archive's records
    holding only `trusted_tensors` (pointers whose CRC32C the caller checks against a manifest) are
    not read twice. Each file is read once in all: with its digests recorded (`recorded`, by
    resolved path) they (and a torch file's trusted tensor CRC32Cs) come from one pass, and a file
    whose CRC32C matches the recorded one has no stored checksum left to check. With
    `verify_slices=False` a DCP directory's slices are read only where a value or a checksum is
    asked for (building a manifest, which judges nothing); its structure is checked all the same.
    `path` may be what `detect` found there already.
    `known_save` is what the ranks that wrote a DCP directory hold of it (its committed metadata,
    its non-tensor values): that is not read again.
    """
    from ..formats.detect import DetectedCheckpoint, detect

    found = path if isinstance(path, DetectedCheckpoint) else detect(path)
    try:
        if found.kind == "dcp":
            from ._view_dcp import dcp_view

            return dcp_view(found.path, trusted_tensors, verify_slices=verify_slices, known=known_save)
        if found.kind == "dcp-hf":
            from ._view_dcp import hf_storage_view

            return hf_storage_view(found.path, verify_slices=verify_slices)
        if found.kind == "deepspeed":
            from ._view_deepspeed import deepspeed_view

            return deepspeed_view(found.path)
        if found.kind in ("hf-trainer", "accelerate"):
            from ._view_hf_training import training_view

            return training_view(found.path, trusted_tensors, recorded)
        if found.kind == "tf-bundle":
            from ._view_tf import tf_view

            return tf_view(found.path, recorded)
        if found.kind == "pickle":
            from ._view_pickle import pickle_view

            return pickle_view(found.path)
        if found.kind == "archive":
            from ._view_pickle import container_view

            return container_view(found.path)
        if found.kind == "torchscript":
            from ._view_torch import torchscript_view

            return torchscript_view(found.path, trusted_tensors, (recorded or {}).get(resolved(found.path)))
        if found.kind == "safetensors":
            from ._view_safetensors import safetensors_view

            return safetensors_view(found.path)
        if found.kind == "torch-legacy":
            from ._view_torch import legacy_torch_view

            return legacy_torch_view(found.path, (recorded or {}).get(resolved(found.path)))
        if found.kind == "keras":
            from ._view_keras import keras_view

            return keras_view(found.path, trusted_tensors)
        from ._view_torch import torch_view

        return torch_view(found.path, trusted_tensors, (recorded or {}).get(resolved(found.path)), detected=found.kind == "torch-zip")
    except OSError as exc:
        raise unreadable(exc.filename or found.path, exc) from None
