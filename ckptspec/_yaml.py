"""Safe YAML in and out.

Loading composes the node tree with the libyaml-backed safe loader when it is available, rejects
duplicate keys, and keeps the tree so that a schema error can be pointed at its line and column.
Dumping is deterministic (the order of the data, never sorted) and writing is atomic.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ._exceptions import WriteError, YAMLSyntaxError

__all__ = ["LoadedYAML", "atomic_write_bytes", "dump_yaml", "load_yaml", "mark_of"]

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class LoadedYAML:
    """Plain data from a YAML document, plus its node tree for locating errors."""

    data: Any
    root: yaml.Node | None
    source: str


def load_yaml(text: str | bytes, source: str | Path = "<string>") -> LoadedYAML:
    """Parse one YAML document with the safe loader; raise `YAMLSyntaxError` naming the place."""
    source = str(source)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YAMLSyntaxError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    loader = _SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = _construct(loader, root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        raise YAMLSyntaxError(_render_marked(source, exc)) from None
    except yaml.YAMLError as exc:
        raise YAMLSyntaxError(f"{source}: {exc}") from None
    finally:
        loader.dispose()
    return LoadedYAML(data=data, root=root, source=source)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"


def _construct(loader: Any, node: yaml.Node) -> Any:
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in (_MAP_TAG, _SEQ_TAG):
        raise yaml.constructor.ConstructorError(None, None, f"unsupported tag {node.tag!r}", node.start_mark)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _construct(loader, key_node)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                )
            if key in result:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            result[key] = _construct(loader, value_node)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_construct(loader, item) for item in node.value]
    return loader.construct_object(node, deep=True)


def _render_marked(source: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if mark is None:
        return f"{source}: {problem}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: {problem}"


def mark_of(root: yaml.Node | None, path: Sequence[str | int]) -> tuple[int, int] | None:
    """(line, column), 1-based, of the deepest node along `path` that exists in the tree."""
    node = root
    best = node.start_mark if node is not None else None
    for part in path:
        child = _child(node, part)
        if child is None:
            break
        node = child
        best = node.start_mark
    return (best.line + 1, best.column + 1) if best is not None else None


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return value_node
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


def dump_yaml(data: Any) -> str:
    """Deterministic block-style YAML: the data's own key order, unicode kept, no aliases."""
    return yaml.dump(
        data,
        Dumper=_NoAliasDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


class _NoAliasDumper(_SafeDumper):  # type: ignore[misc, valid-type]
    def ignore_aliases(self, data: Any) -> bool:
        return True


def atomic_write_bytes(path: str | Path, payload: bytes) -> None:
    """Write `payload` to `path` so that readers see the old file or the new one, never a mix.

    The bytes go to a temporary file in the same directory, are flushed and fsynced, and the file
    is renamed over the target; on any failure the temporary file is removed and the old file stays.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a file in {directory}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        _remove_quietly(tmp_name)
        if isinstance(exc, OSError):
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None
        raise
    _fsync_directory(directory)


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles: the rename itself is the durability point
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
