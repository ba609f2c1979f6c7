"""One view of any checkpoint, for the checks, adoption and diff: its object tree, its tensors,
pickle globals, files and the problems its reader found. `open.open_view` builds it through the
builder `formats.detect.KINDS` names for the checkpoint's kind, one module of this package per family.

Torch and Lightning files give the unpickled tree with a tensor reference at each tensor. A TensorFlow
bundle gives the flat mapping of bundle keys, as the manifest's `at` pointers expect; a pointer that
names no key but is a prefix of keys (`/optimizer`) resolves to the mapping of the keys below it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._dataclass import dataclass
from .._pointer import split_pointer
from .._scan import FileDigests
from .._storage import resolved
from ..formats import CheckpointFormat, GlobalRef
from ..formats._io import unreadable

if TYPE_CHECKING:
    from ..formats.containers import Container
    from ..formats.dcp import KnownSave
    from ..formats.keras import LayerConfig
    from ..formats.lightning import FitProgress
    from ..formats.torchscript import Program

__all__ = [
    "MISSING",
    "CheckpointView",
    "Problem",
    "TensorInfo",
    "ViewRequest",
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


@dataclass(frozen=True)
class ViewRequest:
    """What the caller of `open_view` knows of a checkpoint already, handed to its kind's view builder."""

    trusted_tensors: Collection[str] = ()
    """Pointers whose CRC32C the caller checks against a manifest: records holding only these are not read twice."""
    recorded: Mapping[Path, FileDigests] = field(default_factory=dict)
    """The digests a manifest records for the checkpoint's files, by resolved path."""
    verify_slices: bool = True
    """Whether a sharded directory's slices are read and verified now, or only where asked for."""
    known_save: KnownSave | None = None
    """What the ranks that wrote a DCP directory hold of it, not read again."""

    def digests_of(self, path: Path) -> FileDigests:
        return self.recorded.get(resolved(path)) or FileDigests()


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
        from ..formats._tree import resolve_pointer

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
