"""Build a `CheckpointView` of a torch.distributed.checkpoint directory, and of Lightning's sharded
checkpoints (the same directory with `meta.pt`), which read as the Lightning checkpoint they split.

The tree is the state dict as it was saved, rebuilt from DCP's `planner_data` paths: a tensor is
its `TensorItem` (global shape, dtype, chunks), any other value is read from its slice. `meta.pt`'s
top-level keys join the tree beside the sharded ones, as Lightning itself merges them on load.
DCP's Hugging Face storage layout records no paths: its tensors sit in the tree under their flat names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from .._sidecars import manifest_path_for
from .._exceptions import CkptspecError
from .._pointer import join_pointer
from ..formats._dcp_metadata import BytesItem, DcpMetadata, TensorItem
from ..formats._inspection import CheckpointFormat, GlobalRef
from ..formats.dcp import SHARDED_SAVE_KEY, KnownSave, ShardProblem, open_dcp_directory
from ..formats.hf_storage import open_hf_storage
from .base import CheckpointView, Problem, TensorInfo, ViewRequest
from .torchzip import sniffed_torch_view

__all__ = ["dcp_view", "hf_storage_view"]

_INDEX_KEYED_STATE = re.compile(r"^\d+$")
_LIGHTNING_OPTIMIZER = re.compile(r"^optimizer_(\d+)$")


class _ShardedDirectory(Protocol):
    """What a view needs of a sharded save: `DcpDirectory`, and `HfStorageDirectory` for DCP's
    Hugging Face storage layout."""

    path: Path
    problems: list[ShardProblem]
    globals: list[GlobalRef]
    item_globals: dict[str, list[GlobalRef]]

    @property
    def tensors(self) -> tuple[TensorItem, ...]: ...
    @property
    def byte_items(self) -> tuple[BytesItem, ...]: ...
    @property
    def files(self) -> list[Path]: ...
    @property
    def metadata_files(self) -> list[Path]: ...
    def verify(self, trusted: Collection[str]) -> list[ShardProblem]: ...
    def read_value(self, item: BytesItem) -> Any: ...
    def item_file(self, item: BytesItem) -> Path: ...
    def tensor_crc32c(self, tensor: TensorItem) -> int: ...
    def damaged_chunks(self, tensor: TensorItem) -> list[ShardProblem]: ...


def dcp_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a DCP directory; its `problems` are the structural ones, then, with
    `request.verify_slices`, every slice not covered by `request.trusted_tensors` (pointers whose CRC32C the caller
    checks) read and verified. What the writer knows (`request.known_save`: the committed metadata, values of
    non-tensor items) is taken as it is, not read again."""
    known = request.known_save or KnownSave()
    directory = open_dcp_directory(path, known.metadata)
    lightning = directory.lightning_meta is not None
    if lightning:
        directory.metadata = _as_lightning_saved(directory.metadata)
    format: CheckpointFormat = "lightning" if lightning else "dcp"
    view = _sharded_view(directory, format, request.trusted_tensors, verify_slices=request.verify_slices, item_values=known.values)
    if directory.lightning_meta is not None:
        _join_lightning_meta(view, directory.lightning_meta, request.trusted_tensors)
    return view


def hf_storage_view(path: Path, request: ViewRequest) -> CheckpointView:
    """The view of a save in DCP's Hugging Face storage layout: every tensor under its flat name,
    chunks gathered from every rank's shard files."""
    directory = open_hf_storage(path)
    view = _sharded_view(directory, "dcp", (), verify_slices=request.verify_slices)
    view.closer = directory.close
    return view


def _sharded_view(
    directory: _ShardedDirectory,
    format: CheckpointFormat,
    trusted_tensors: Collection[str],
    *,
    verify_slices: bool = True,
    item_values: Mapping[str, Any] | None = None,
) -> CheckpointView:
    pointers = {tensor.fqn: join_pointer(tensor.path) for tensor in directory.tensors}
    trusted = {fqn for fqn, pointer in pointers.items() if pointer in trusted_tensors}
    verified = _verified(directory, trusted) if verify_slices else []
    problems = [*directory.problems, *_unfinished_save(directory), *verified, *_index_keyed_optimizers(directory)]
    tree = _tree(directory, item_values or {})
    items = {item.fqn: item for item in directory.byte_items}
    item_globals = [(items[fqn], used) for fqn, named in directory.item_globals.items() for used in named]
    return CheckpointView(
        path=directory.path,
        format=format,
        tree=tree,
        tensors={pointers[tensor.fqn]: _tensor_info(directory, pointers[tensor.fqn], tensor) for tensor in directory.tensors},
        files=directory.files,
        globals=[*directory.globals, *(used for _item, used in item_globals)],
        global_files={used.qualname: directory.item_file(item) for item, used in item_globals if used.safety != "allowed"},
        problems=[_problem(problem, pointers) for problem in problems],
    )


def _as_lightning_saved(metadata: DcpMetadata | None) -> DcpMetadata | None:
    """The paths as Lightning's checkpoint dict has them before its sharded strategies split it, and
    after they load it: the model under `state_dict` (FSDPStrategy saves it as `model`), optimizer
    `i` at `optimizer_states/i` (saved as `optimizer_i`)."""
    if metadata is None:
        return None
    return replace(
        metadata,
        tensors=tuple(replace(tensor, path=_lightning_path(tensor.path)) for tensor in metadata.tensors),
        byte_items=tuple(replace(item, path=_lightning_path(item.path)) for item in metadata.byte_items),
    )


def _lightning_path(path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    head, rest = path[0], path[1:]
    if head == "model":
        return ("state_dict", *rest)
    if isinstance(head, str) and (match := _LIGHTNING_OPTIMIZER.match(head)):
        return ("optimizer_states", int(match.group(1)), *rest)
    return path


def _unfinished_save(directory: _ShardedDirectory) -> list[ShardProblem]:
    """The save of `ckptspec.torch.save_sharded` (whose own entries are under `ckptspec`), when
    the manifest it writes last is not beside the directory."""
    items = (*directory.tensors, *directory.byte_items)
    if not directory.metadata_files or not any(item.path[:1] == (SHARDED_SAVE_KEY,) for item in items) or manifest_path_for(directory.path).exists():
        return []
    message = (
        f"saved by ckptspec's sharded save (its metadata holds `{SHARDED_SAVE_KEY}` entries), but the manifest "
        f"{manifest_path_for(directory.path).name} that the save writes last is missing: the save did not finish"
    )
    return [ShardProblem("unfinished-save", directory.metadata_files[0], message)]


def _verified(directory: _ShardedDirectory, trusted: set[str]) -> list[ShardProblem]:
    damaged = {problem.fqn for problem in directory.problems}
    return [problem for problem in directory.verify(trusted) if problem.fqn not in damaged]


def _index_keyed_optimizers(directory: _ShardedDirectory) -> list[ShardProblem]:
    """Optimizer state saved under parameter indices (`optimizer.state_dict()`), not parameter names
    (`get_state_dict`): one fact per optimizer, recorded so resharding or a changed model is judged with it."""
    found: dict[tuple[str | int, ...], TensorItem] = {}
    for tensor in directory.tensors:
        for depth, part in enumerate(tensor.path[:-2]):
            if part == "state" and _INDEX_KEYED_STATE.match(str(tensor.path[depth + 1])):
                found.setdefault(tensor.path[:depth], tensor)
    return [
        ShardProblem(
            "optimizer-keyed-by-index",
            directory.metadata_files[0],
            f"{join_pointer(prefix) or '/'}: optimizer state is keyed by parameter index (e.g. {tensor.fqn}), "
            "so restoring it relies on the parameters keeping their order",
        )
        for prefix, tensor in found.items()
    ]


def _tree(directory: _ShardedDirectory, item_values: Mapping[str, Any]) -> dict[Any, Any]:
    tree: dict[Any, Any] = {}
    for tensor in directory.tensors:
        _place(tree, tensor.path, tensor)
    for item in directory.byte_items:
        _place(tree, item.path, item_values[item.fqn] if item.fqn in item_values else _value_or_none(directory, item))
    return _as_saved(tree)


def _as_saved(node: Any, key: Any = None) -> Any:
    """Undo what DCP's flattening changed in the paths: a list became integer path parts (a mapping
    keyed exactly 0..n-1 was one), and an optimizer's `state` keys (parameter indices) became strings."""
    if not isinstance(node, dict):
        return node
    children = {child_key: _as_saved(value, child_key) for child_key, value in node.items()}
    if key == "state" and children and all(_INDEX_KEYED_STATE.match(str(k)) for k in children):
        return {int(k): value for k, value in children.items()}
    if children and all(type(k) is int for k in children) and sorted(children) == list(range(len(children))):
        return [children[index] for index in range(len(children))]
    return children


def _value_or_none(directory: _ShardedDirectory, item: BytesItem) -> Any:
    """The item's value; None when its slice cannot be read (its problem is listed already)."""
    try:
        return directory.read_value(item)
    except (CkptspecError, OSError):
        return None


def _place(tree: dict[Any, Any], path: tuple[str | int, ...], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            return  # a value and a container at the same path: DCP's flattening never writes both
        node = child
    node[path[-1]] = value


def _tensor_info(directory: _ShardedDirectory, pointer: str, tensor: TensorItem) -> TensorInfo:
    files = sorted({chunk.location.file for chunk in tensor.chunks if chunk.location is not None})
    return TensorInfo(
        pointer=pointer,
        dtype=tensor.dtype,
        shape=tensor.shape,
        file=directory.path / files[0] if len(files) == 1 else directory.path,
        read_crc32c=lambda: f"{directory.tensor_crc32c(tensor):08x}",
        locate_damage=_damage_locator(directory, tensor) if len(files) > 1 else None,
    )


def _damage_locator(directory: _ShardedDirectory, tensor: TensorItem) -> Callable[[], list[tuple[Path, str]]]:
    """`TensorInfo.locate_damage` of a tensor whose chunks lie in several files."""
    return lambda: [(problem.file, problem.message.removeprefix(f"{tensor.fqn}: ")) for problem in directory.damaged_chunks(tensor)]


def _problem(problem: ShardProblem, pointers: dict[str, str]) -> Problem:
    """The problem for the findings, which name the tensor by its pointer rather than DCP's key."""
    pointer = pointers.get(problem.fqn) if problem.fqn is not None else None
    message = problem.message.removeprefix(f"{problem.fqn}: ") if pointer is not None else problem.message
    return Problem(kind=problem.kind, file=problem.file, message=message, pointer=pointer)


def _join_lightning_meta(view: CheckpointView, meta: Path, trusted_tensors: Collection[str]) -> None:
    """Lightning's `meta.pt`: the loops, callbacks, epoch and step beside the sharded state."""
    rest = sniffed_torch_view(meta, trusted_tensors)
    if isinstance(rest.tree, dict):
        for key, value in rest.tree.items():
            view.tree.setdefault(key, value)
    view.tensors.update({pointer: tensor for pointer, tensor in rest.tensors.items() if pointer not in view.tensors})
    view.globals.extend(rest.globals)
    view.problems.extend(rest.problems)
    view.closer = rest.closer
