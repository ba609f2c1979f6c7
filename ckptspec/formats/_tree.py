"""Walking a checkpoint's object tree as the readers give it: JSON Pointers to each value and
tensor, a pointer's value, and the components a plain `torch.save` dict names."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .._pointer import escape_segment
from ._inspection import GlobalRef
from ._pickle_safety import PickleReadStopped, Stub
from ._pickle_values import PickledNamespace
from ._tensors import StoredTensor, TensorRef, TorchDType

__all__ = [
    "component_of",
    "iter_tensors",
    "plain_components",
    "resolve_pointer",
    "walk",
]

_Path = tuple[list[Any], Any] | None
"""Where a node lies: `(its parent's place, key)`, None for the root. A parent's place is a list
`[the parent's path, its pointer or None]` that its children share: a pointer is rendered only where
one is asked for (building one for every node would cost the sum of their depths), and then each
container's own pointer at most once, however many tensors it holds."""


_POINTER_CHARACTERS_PER_NODE = 256


_POINTER_ALLOWANCE = 1 << 20
"""Tensor pointers rendered by one walk may take this many characters per node walked, and this many
more: far beyond any real checkpoint's, whose tensors sit a few levels deep, yet linear in the tree.
A tensor shared at every place of a list nested a million levels deep would need quadratically many."""


_PLAIN_COMPONENT_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("model", "model_state_dict", "state_dict", "model_state", "net", "module", "weights"),
    "optimizer": ("optimizer", "optimizer_state_dict", "optimizer_states", "optim", "opt"),
    "scheduler": ("scheduler", "lr_scheduler", "scheduler_state_dict", "lr_schedulers", "schedulers"),
    "scaler": ("scaler", "grad_scaler", "scaler_state_dict", "amp"),
    "ema": ("ema", "ema_state_dict", "model_ema", "ema_model", "state_dict_ema"),
    "rng": ("rng", "rng_state", "rng_states", "random_state"),
    "data_position": ("data_position", "sampler", "dataloader", "sampler_state"),
    "config": ("config", "cfg", "args", "hparams", "hyper_parameters"),
}


_RNG_KEYS = frozenset({"python", "numpy", "cpu", "torch", "cuda", "mps", "xla", "xpu", "npu", "hpu", "mlu", "musa"})
"""Keys of a dict of generator states saved on its own (a Hugging Face Trainer's rng_state.pth)."""


def _segment(key: Any) -> str:
    return escape_segment(key if isinstance(key, str) else str(key) if type(key) is int else repr(key))


def _children(value: Any) -> Iterator[tuple[Any, Any]] | None:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return enumerate(value)
    if isinstance(value, Stub):
        return value.children()
    if isinstance(value, PickledNamespace):
        return iter(value.attributes.items())
    return None


def _nodes(tree: Any) -> Iterator[tuple[_Path, Any, int]]:
    """Every node with its path and depth, depth first in document order; a container reached twice
    (shared, or a cycle) is expanded only the first time. Iterative: nesting costs no recursion."""
    expanded: set[int] = set()
    pending: list[tuple[_Path, Any, int]] = [(None, tree, 0)]
    while pending:
        path, value, depth = pending.pop()
        yield path, value, depth
        children = _children(value)
        if children is None or id(value) in expanded:
            continue
        expanded.add(id(value))
        place = [path, None]
        pending.extend(reversed([((place, key), child, depth + 1) for key, child in children]))


def _render(path: _Path) -> str:
    """The pointer of the node at `path`; each container's pointer met on the way up is kept in its
    children's place, so the next sibling's costs one segment."""
    if path is None:
        return ""
    climbed = []
    while True:
        place, _key = path
        climbed.append(path)
        if place[1] is not None:
            pointer = place[1]
            break
        if place[0] is None:  # a child of the root
            pointer = ""
            break
        path = place[0]
    for place, key in reversed(climbed):
        place[1] = pointer
        pointer = f"{pointer}/{_segment(key)}"
    return pointer


def walk(tree: Any) -> Iterator[tuple[str, Any]]:
    """Every node with its JSON Pointer, depth first in document order.

    Dict keys that are not strings become `str(int)` or `repr(key)`. Below a `Stub` the segments are
    `args`, `kwargs`, `state`, `items`, `list_items`, `attributes`; below a Namespace, its attributes.
    A container reached twice (shared, or a cycle) is expanded only the first time. Every pointer is
    rendered, which costs the sum of the nodes' depths: readers look for tensors with `iter_tensors`.
    """
    expanded: set[int] = set()
    pending: list[tuple[str, Any]] = [("", tree)]
    while pending:
        pointer, value = pending.pop()
        yield pointer, value
        children = _children(value)
        if children is None or id(value) in expanded:
            continue
        expanded.add(id(value))
        pending.extend(reversed([(f"{pointer}/{_segment(key)}", child) for key, child in children]))


def iter_tensors(tree: Any, source: str = "the object tree", globals_named: Iterable[GlobalRef] = ()) -> Iterator[tuple[str, TensorRef]]:
    """`(pointer, TensorRef)` for every tensor in the tree, in document order, in time linear in the
    tree: only tensors' pointers are rendered, and when those would outgrow the tree
    (`_POINTER_CHARACTERS_PER_NODE`) the tree is refused as unreadable (`source` names it), carrying
    `globals_named` (what the pickle names), since reading the tree has run them all."""
    budget = _POINTER_ALLOWANCE
    for path, value, depth in _nodes(tree):
        budget += _POINTER_CHARACTERS_PER_NODE
        if isinstance(value, TensorRef):
            pointer = _render(path)
            budget -= len(pointer)
            if budget < 0:
                raise PickleReadStopped(
                    f"{source}: tensors sit {depth} levels deep, so many times that their pointers would take more"
                    f" than {_POINTER_CHARACTERS_PER_NODE} characters for each value of the tree; no checkpoint nests its tensors so",
                    list(globals_named),
                )
            yield pointer, value


def resolve_pointer(tree: Any, pointer: str) -> Any:
    """The node at a JSON Pointer produced by `walk` (raises KeyError when there is none)."""
    node = tree
    for segment in pointer.split("/")[1:] if pointer else []:
        for key, child in _children(node) or iter(()):
            if _segment(key) == segment:
                node = child
                break
        else:
            raise KeyError(pointer)
    return node


def plain_components(tree: Any) -> dict[str, str]:
    """Where a plain torch.save dict keeps each component, by its usual key names. A file may hold
    one component whole: a module's state dict (a DCP save's tensors too), or the state dict of an
    optimizer, scheduler or grad scaler, or generator states, each saved to its own file."""
    if not isinstance(tree, dict):
        return {}
    whole = _whole_component(tree)
    if whole is not None:
        return {whole: ""}
    components: dict[str, str] = {}
    for component, keys in _PLAIN_COMPONENT_KEYS.items():
        for key in keys:
            if key in tree:
                components[component] = "/" + escape_segment(key)
                break
    return components


def _whole_component(tree: dict[Any, Any]) -> str | None:
    """The component a dict is by its own keys (as each class's `state_dict()` writes them), if any."""
    keys = tree.keys()
    if {"state", "param_groups"} <= keys:
        return "optimizer"
    if isinstance(tree.get("last_epoch"), int) and "base_lrs" in keys:
        return "scheduler"
    if {"scale", "_growth_tracker"} <= keys:
        return "scaler"
    if len(keys) > 1 and keys <= _RNG_KEYS:
        return "rng"
    has_tensor = any(isinstance(value, StoredTensor) for value in tree.values())
    return "model" if has_tensor and all(_state_dict_entry(value) for value in tree.values()) else None


def _state_dict_entry(value: Any) -> bool:
    """A value a module's state dict holds: a tensor, or what quantized and sparse modules save
    besides (a dtype, a tuple of packed tensors, a rebuilt sparse tensor)."""
    if isinstance(value, (StoredTensor, TorchDType)) or _is_sparse(value):
        return True
    # One level only: packed parameters are a flat tuple.
    return isinstance(value, tuple) and all(isinstance(item, (TensorRef, TorchDType)) or item is None for item in value)


def _is_sparse(value: Any) -> bool:
    return isinstance(value, Stub) and (value.module, value.name) == ("torch._utils", "_rebuild_sparse_tensor")


def component_of(pointer: str, components: dict[str, str]) -> str | None:
    best: tuple[int, str] | None = None
    for name, at in components.items():
        if (pointer == at or pointer.startswith(at + "/")) and (best is None or len(at) > best[0]):
            best = (len(at), name)
    return best[1] if best else None
