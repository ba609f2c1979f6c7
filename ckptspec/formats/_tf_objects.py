"""Which object each bundle key belongs to, and the role that object plays in training.

TF2 bundles store a `TrackableObjectGraph` (tensorflow/core/protobuf/trackable_object_graph.proto)
under `OBJECT_GRAPH_KEY`; decoded into an `ObjectGraph`, it gives every key an object path and a
`Role` (model variable, optimizer slot, RNG state, ...). TF1 `Saver` bundles, and TF2 bundles whose
graph is unreadable, are placed by the keys' names alone.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import Literal

from .._dataclass import dataclass
from ._protobuf import as_int32, iter_fields

__all__ = ["COMPONENT_OF_ROLE", "OBJECT_GRAPH_KEY", "ObjectGraph", "Role", "TrackableObject", "key_placement"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

Role = Literal[
    "model_variable",
    "optimizer_variable",
    "optimizer_slot",
    "optimizer_iterations",
    "learning_rate",
    "save_counter",
    "rng_state",
    "data_iterator",
    "object_graph",
    "other",
]

COMPONENT_OF_ROLE: dict[str, str] = {
    "model_variable": "model",
    "optimizer_variable": "optimizer",
    "optimizer_slot": "optimizer",
    "optimizer_iterations": "optimizer",
    "learning_rate": "optimizer",
    "rng_state": "rng",
    "data_iterator": "data_position",
}


@dataclass(frozen=True)
class TrackableObject:
    children: tuple[tuple[int, str], ...]
    """(node id, local name) per edge."""
    attributes: tuple[tuple[str, str], ...]
    """(attribute name, checkpoint key) per saved tensor."""
    slot_variables: tuple[tuple[int, str, int], ...]
    """(original variable node id, slot name, slot variable node id)."""


@dataclass(frozen=True)
class ObjectGraph:
    """A decoded `TrackableObjectGraph`; node 0 is the `tf.train.Checkpoint` root."""

    nodes: tuple[TrackableObject, ...]

    @classmethod
    def decode(cls, serialized: bytes) -> ObjectGraph:
        return cls(
            tuple(
                _decode_trackable(value)
                for number, _w, value in iter_fields(serialized)
                if number == 1 and isinstance(value, bytes)
            )
        )

    def node_paths(self) -> dict[int, str]:
        """Each reachable node's path from the root, shortest first as TensorFlow names keys."""
        paths = {0: ""}
        queue = deque([0])
        while queue:
            node_id = queue.popleft()
            for child_id, local_name in self._children(node_id):
                if child_id not in paths:
                    name = _escaped(local_name)
                    paths[child_id] = f"{paths[node_id]}/{name}" if paths[node_id] else name
                    queue.append(child_id)
        return paths

    def node_at(self, path: str) -> int | None:
        """The node an object path (as `node_paths` writes it) leads to from the root, or None.

        Walks one name at a time, so placing every key costs what the keys' own bytes do, however
        deep the graph: building every node's path string would cost the square of its depth.
        """
        node_id = 0
        for name in path.split("/") if path else ():
            found = self._named_children(node_id).get(name)
            if found is None:
                return None
            node_id = found
        return node_id

    def _named_children(self, node_id: int) -> dict[str, int]:
        cache: dict[int, dict[str, int]] = self.__dict__.setdefault("_named_children_cache", {})
        if node_id not in cache:
            named: dict[str, int] = {}
            for child_id, local_name in self._children(node_id):
                named.setdefault(_escaped(local_name), child_id)
            cache[node_id] = named
        return cache[node_id]

    def roles(self) -> dict[int, Role]:
        """The role of every node that holds tensors, from the kind of objects it is reachable from."""
        reached: dict[int, set[str]] = {}
        seen: set[tuple[int, str]] = set()
        queue: deque[tuple[int, str]] = deque()
        for child_id, local_name in self._children(0):
            queue.append((child_id, self._root_child_label(child_id, local_name)))
        while queue:
            node_id, label = queue.popleft()
            if (node_id, label) in seen:
                continue
            seen.add((node_id, label))
            reached.setdefault(node_id, set()).add(label)
            for child_id, local_name in self._children(node_id):
                queue.append((child_id, self._child_label(label, child_id, local_name)))
        for node in self.nodes:
            for _original, _slot_name, slot_id in node.slot_variables:
                reached.setdefault(slot_id, set()).add("optimizer_slot")
        return {node_id: _strongest_role(labels) for node_id, labels in reached.items()}

    def _children(self, node_id: int) -> tuple[tuple[int, str], ...]:
        if 0 <= node_id < len(self.nodes):
            return tuple(child for child in self.nodes[node_id].children if 0 <= child[0] < len(self.nodes))
        return ()

    def _root_child_label(self, node_id: int, local_name: str) -> str:
        node = self.nodes[node_id]
        kind = self._kind(node_id)
        if kind:
            return kind
        if local_name == "save_counter" and node.attributes:
            return "save_counter"
        return "other" if node.attributes and not node.children else "model_variable"

    def _child_label(self, parent_label: str, node_id: int, local_name: str) -> str:
        kind = self._kind(node_id)
        if kind:
            return kind
        if parent_label.startswith("optimizer"):
            if local_name == "_trainable_variables":
                return "model_variable"
            if local_name in _ITERATION_NAMES:
                return "optimizer_iterations"
            if local_name in _LEARNING_RATE_NAMES:
                return "learning_rate"
            return "optimizer_variable"
        return parent_label

    def _kind(self, node_id: int) -> str | None:
        kinds: dict[int, str | None] = self.__dict__.setdefault("_kind_cache", {})
        if node_id not in kinds:
            kinds[node_id] = self._find_kind(node_id)
        return kinds[node_id]

    def _find_kind(self, node_id: int) -> str | None:
        node = self.nodes[node_id]
        child_names = {name for _child, name in node.children}
        if node.slot_variables or child_names & _ITERATION_NAMES:
            return "optimizer_variable"
        if "_state_var" in child_names:
            return "rng_state"
        if any(name.startswith("ITERATOR") for name, _key in node.attributes):
            return "data_iterator"
        return None


_ITERATION_NAMES = {"_iterations", "iter", "iterations"}
_LEARNING_RATE_NAMES = {"_learning_rate", "learning_rate", "lr"}
# A model's weights are also tracked by its optimizer (Keras 3 `_trainable_variables`): the model wins.
_ROLE_PRIORITY: tuple[Role, ...] = (
    "model_variable",
    "optimizer_slot",
    "optimizer_iterations",
    "learning_rate",
    "optimizer_variable",
    "rng_state",
    "data_iterator",
    "save_counter",
    "other",
)


def _escaped(local_name: str) -> str:
    """A child's name as it appears in an object path: `.` doubled, `/` written `.S`."""
    return local_name.replace(".", "..").replace("/", ".S")


def _strongest_role(labels: set[str]) -> Role:
    return next(role for role in _ROLE_PRIORITY if role in labels)


def _decode_trackable(serialized: bytes) -> TrackableObject:
    children, attributes, slots = [], [], []
    for number, _wire, value in iter_fields(serialized):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            fields = _message_fields(value)
            children.append((as_int32(int(fields.get(1, 0))), _text(fields.get(2, b""))))
        elif number == 2:
            fields = _message_fields(value)
            attributes.append((_text(fields.get(1, b"")), _text(fields.get(3, b""))))
        elif number == 3:
            fields = _message_fields(value)
            slots.append((as_int32(int(fields.get(1, 0))), _text(fields.get(2, b"")), as_int32(int(fields.get(3, 0)))))
    return TrackableObject(tuple(children), tuple(attributes), tuple(slots))


def _message_fields(serialized: bytes) -> dict[int, int | bytes]:
    """Singular fields of a message by number (the last one wins, as in proto3)."""
    return {number: value for number, _wire, value in iter_fields(serialized)}


def _text(value: int | bytes) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def key_placement(graph: ObjectGraph | None) -> Callable[[str], tuple[str, Role]]:
    """(object path, role) of each key: from `graph`, or from the key's name when there is no readable graph."""
    place = _name_based_placement if graph is None else _graph_placement(graph)

    def place_key(key: str) -> tuple[str, Role]:
        if key == OBJECT_GRAPH_KEY:
            return "", "object_graph"
        return place(key)

    return place_key


def _graph_placement(graph: ObjectGraph) -> Callable[[str], tuple[str, Role]]:
    roles = graph.roles()
    node_of_key = {key: node_id for node_id, node in enumerate(graph.nodes) for _name, key in node.attributes}

    def place(key: str) -> tuple[str, Role]:
        path = _object_path(key)
        node_id = node_of_key.get(key)
        if node_id is None:
            node_id = graph.node_at(path)
        return path, roles.get(node_id, "other") if node_id is not None else "other"

    return place


_TF1_SLOT_SUFFIX = re.compile(
    r"/(Adam|Adam_1|Momentum|RMSProp|RMSProp_1|Adagrad|Adadelta|Adadelta_1|Ftrl|Ftrl_1)(_\d+)?$"
)


def _name_based_placement(key: str) -> tuple[str, Role]:
    """Roles of TF1 `Saver` keys (bare variable names) and of TF2 keys whose graph is unreadable."""
    if "/.OPTIMIZER_SLOT/" in key or _TF1_SLOT_SUFFIX.search(key):
        return _object_path(key), "optimizer_slot"
    last = key.rsplit("/", 1)[-1]
    if last in ("beta1_power", "beta2_power"):
        return key, "optimizer_variable"
    if last == "global_step":
        return key, "optimizer_iterations"
    return _object_path(key), "model_variable"


_ATTRIBUTE_SEPARATORS = ("/.ATTRIBUTES/", "/.TENSORS/")


def _object_path(key: str) -> str:
    for separator in _ATTRIBUTE_SEPARATORS:
        if separator in key:
            return key.split(separator, 1)[0]
    return key
