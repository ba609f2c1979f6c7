"""Match the live objects under a `tf.train.Checkpoint` to the nodes of a saved object graph.

TensorFlow matches a checkpoint to a program by walking both graphs from the root along the same
edge names. Walking them here, side by side, tells which bundle keys each live object owns, which
saved values nothing in the program took (`assert_consumed`'s "unresolved objects"), and which
stateful live objects the checkpoint has no value for (its "unmatched objects") — by name, which
TensorFlow's own assertion does not give.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from dataclasses import field

import tensorflow as tf

from .._dataclass import dataclass
from ..formats.tfbundle import ObjectGraph

__all__ = ["GraphMatch", "match_graph", "untracked_variables"]


@dataclass(frozen=True)
class GraphMatch:
    """The outcome of walking a live checkpoint root and a saved object graph together."""

    keys_by_object: dict[int, tuple[str, ...]] = field(repr=False)
    """`id(live object)` → the bundle keys of the node it matched."""
    node_by_object: dict[int, int] = field(repr=False)
    unconsumed: tuple[str, ...]
    """Bundle keys of saved nodes that no live object matched."""
    unmatched: tuple[str, ...]
    """Paths of live variables and iterators that have no node in the checkpoint."""
    conflicts: tuple[str, ...]
    """Saved nodes reached from two different live objects (e.g. an optimizer built over reordered weights)."""

    def keys_of(self, live: object) -> tuple[str, ...]:
        return self.keys_by_object.get(id(live), ())


def match_graph(root: tf.train.Checkpoint, graph: ObjectGraph, bundle_keys: Iterable[str]) -> GraphMatch:
    view = tf.train.TrackableView(root)
    node_by_object: dict[int, int] = {id(root): 0}
    object_by_node: dict[int, int] = {0: id(root)}
    path_of_node: dict[int, str] = {0: "(root)"}
    unmatched_candidates: dict[int, str] = {}
    conflicts: list[str] = []
    visited: set[int] = {id(root)}
    queue: deque[tuple[object, int | None, str]] = deque([(root, 0, "")])
    while queue:
        live, node_id, path = queue.popleft()
        saved_children = {name: child for child, name in graph.nodes[node_id].children} if node_id is not None else {}
        for name, child in view.children(live).items():
            child_path = f"{path}/{name}" if path else name
            child_node = saved_children.get(name)
            if child_node is not None:
                owner = object_by_node.setdefault(child_node, id(child))
                if owner != id(child):
                    conflicts.append(f"{path_of_node[child_node]} and {child_path}")
                    continue
                node_by_object.setdefault(id(child), child_node)
                path_of_node.setdefault(child_node, child_path)
            elif _is_stateful(child):
                unmatched_candidates.setdefault(id(child), child_path)
            if id(child) not in visited:
                visited.add(id(child))
                queue.append((child, node_by_object.get(id(child)), child_path))
    keys_of_node = _bundle_keys_of_nodes(graph, sorted(bundle_keys))
    keys_by_object = {live_id: keys_of_node[node_id] for live_id, node_id in node_by_object.items()}
    matched_nodes = set(object_by_node)
    unconsumed = tuple(key for node_id, keys in keys_of_node.items() if node_id not in matched_nodes for key in keys)
    # A variable missed along one path may still be matched along another (weights tracked by both
    # the model and the optimizer), so only what stayed unmatched after the whole walk counts.
    unmatched = tuple(path for live_id, path in unmatched_candidates.items() if live_id not in node_by_object)
    return GraphMatch(keys_by_object, node_by_object, unconsumed, unmatched, tuple(conflicts))


def _bundle_keys_of_nodes(graph: ObjectGraph, bundle_keys: list[str]) -> dict[int, tuple[str, ...]]:
    """Bundle keys per node. An attribute's key is a prefix of the keys its tensors are stored under when the
    object saves several or suffixed ones (a tf.data iterator's `.../ITERATOR` is stored as `.../ITERATOR_STATE`)."""
    return {
        node_id: tuple(stored for _name, key in node.attributes for stored in _stored_under(bundle_keys, key))
        for node_id, node in enumerate(graph.nodes)
    }


def _stored_under(sorted_keys: list[str], key: str) -> Iterator[str]:
    for candidate in islice(sorted_keys, bisect_left(sorted_keys, key), None):
        if not candidate.startswith(key):
            return
        if "/" not in candidate[len(key) :]:
            yield candidate


def _is_stateful(live: object) -> bool:
    return isinstance(live, (tf.Variable, tf.data.Iterator))


def untracked_variables(root: object, variables: list[tf.Variable]) -> list[tf.Variable]:
    """The `variables` that a checkpoint of `root` would silently leave out.

    Keras 3 keeps the state of its `SeedGenerator`s (Dropout, GaussianNoise, ...) in variables that
    its layers do not expose to `tf.train.Checkpoint`.
    """
    reachable = {id(trackable) for trackable in tf.train.TrackableView(root).descendants()}
    return [variable for variable in variables if id(variable) not in reachable]
