"""YAML through PyYAML's safe loader and emitter: every text the block reader (`_yaml_block`)
leaves, every document its writer cannot write, and the node tree that points an error at its line.

Loading builds plain data straight from the libyaml-backed parser's events when libyaml is there,
rejects duplicate keys, and bounds nesting and what aliases expand to.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import yaml

from ._exceptions import YAMLSyntaxError
from ._yaml_block import ALIAS_NODE_LIMIT, INTEGER_BITS, NESTING_LIMIT

__all__ = ["compose", "dump", "load", "mark_of"]

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load(text: str, source: str) -> Any:
    """The data of one YAML document with the safe loader; raise `YAMLSyntaxError` naming the place."""
    loader = _SafeLoader(text)
    try:
        data = _EventBuilder(loader).document()
    except yaml.MarkedYAMLError as exc:
        raise YAMLSyntaxError(_render_marked(source, exc)) from None
    except yaml.YAMLError as exc:
        raise YAMLSyntaxError(f"{source}: {exc}") from None
    finally:
        loader.dispose()
    return data


def compose(text: str) -> yaml.Node | None:
    """The node tree of `text`, for pointing an error at its line and column."""
    loader = _SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


_PLAIN_VALUES: dict[str, Any] = {}
"""Short plain scalars already resolved, with their values (all immutable: str, int, float, bool,
None, dates), shared by every document a process loads: manifests repeat their keys and values."""
_PLAIN_VALUES_LIMIT = 4096
_PLAIN_VALUE_LENGTH = 64
_UNKNOWN = object()

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_ConstructorError = yaml.constructor.ConstructorError
_ScalarEvent, _SequenceEndEvent, _MappingEndEvent = yaml.ScalarEvent, yaml.SequenceEndEvent, yaml.MappingEndEvent


class _EventBuilder:
    """Builds plain data straight from parser events.

    It gives the same values as `yaml.safe_load` but resolves each distinct plain scalar once (a
    manifest repeats dtypes, roles and shapes thousands of times, an audit's manifests their keys),
    and refuses duplicate keys and any tag the safe loader would not construct.
    """

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._anchors: dict[str, Any] = {}
        self._plain_cache: dict[str, Any] = {}
        self._nodes = 0
        """Nodes built so far, each alias counted as the nodes of what it names (as consumers see it)."""
        self._anchor_nodes: dict[str, int] = {}
        self._alias_nodes = 0
        self._depth = 0

    def document(self) -> Any:
        loader = self._loader
        loader.get_event()  # StreamStart
        if loader.check_event(yaml.StreamEndEvent):
            return None
        loader.get_event()  # DocumentStart
        data = self._value(loader.get_event())
        loader.get_event()  # DocumentEnd
        if not loader.check_event(yaml.StreamEndEvent):
            event = loader.get_event()
            raise _ConstructorError(None, None, "expected one document, found another", event.start_mark)
        return data

    def _value(self, event: Any) -> Any:
        if type(event) is _ScalarEvent and event.anchor is None:  # most nodes: nothing to remember
            self._nodes += 1
            if event.tag is None and event.implicit[0]:  # plain: most are resolved already
                known = _PLAIN_VALUES.get(event.value, _UNKNOWN)
                if known is not _UNKNOWN:
                    return known
            return self._scalar(event)
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event)
        if event.anchor is not None:
            self._anchor_nodes.pop(event.anchor, None)  # an anchor named again: unusable until complete
        first_node = self._nodes
        self._nodes += 1
        value = self._node_value(event)
        if event.anchor is not None:
            self._anchor_nodes[event.anchor] = self._nodes - first_node
        return value

    def _alias(self, event: Any) -> Any:
        if event.anchor not in self._anchors:
            raise _ConstructorError(None, None, f"unknown alias {event.anchor!r}", event.start_mark)
        if event.anchor not in self._anchor_nodes:
            raise _ConstructorError(None, None, f"alias {event.anchor!r} refers to a node that contains it", event.start_mark)
        # Shared, not copied here; but every reader of the data walks each alias in full.
        self._alias_nodes += self._anchor_nodes[event.anchor]
        self._nodes += self._anchor_nodes[event.anchor]
        if self._alias_nodes > ALIAS_NODE_LIMIT:
            raise _ConstructorError(
                None, None, f"aliases expand to more than {ALIAS_NODE_LIMIT} nodes (a 'billion laughs' document)", event.start_mark
            )
        return self._anchors[event.anchor]

    def _node_value(self, event: Any) -> Any:
        if isinstance(event, yaml.ScalarEvent):
            value = self._scalar(event)
            self._remember(event, value)
            return value
        if not isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            raise _ConstructorError(None, None, "unexpected YAML event", event.start_mark)
        if self._depth == NESTING_LIMIT:
            raise _ConstructorError(None, None, f"nested deeper than {NESTING_LIMIT} levels, more than any spec or manifest", event.start_mark)
        self._depth += 1
        collection = self._mapping(event) if isinstance(event, yaml.MappingStartEvent) else self._sequence(event)
        self._depth -= 1
        return collection

    def _mapping(self, event: Any) -> dict[Any, Any]:
        self._check_tag(event, _MAP_TAG)
        value: dict[Any, Any] = {}
        self._remember(event, value)
        self._fill_mapping(value)
        return value

    def _sequence(self, event: Any) -> list[Any]:
        self._check_tag(event, _SEQ_TAG)
        value: list[Any] = []
        self._remember(event, value)
        get_event, value_of = self._loader.get_event, self._value
        while type(item := get_event()) is not _SequenceEndEvent:
            value.append(value_of(item))
        return value

    def _fill_mapping(self, mapping: dict[Any, Any]) -> None:
        merged: dict[Any, Any] = {}
        get_event, value_of = self._loader.get_event, self._value
        while type(key_event := get_event()) is not _MappingEndEvent:
            key = value_of(key_event)
            value = value_of(get_event())
            if type(key) is not str or key == "<<":  # most keys are plain strings: nothing more to check
                if key == "<<" and isinstance(key_event, yaml.ScalarEvent) and key_event.implicit[0]:
                    merged.update(self._merge_source(value, key_event))
                    continue
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise _ConstructorError(None, None, "a mapping key must be a scalar", key_event.start_mark)
            if key in mapping:
                raise _ConstructorError(None, None, f"duplicate key {key!r}", key_event.start_mark)
            mapping[key] = value
        for key, value in merged.items():
            mapping.setdefault(key, value)

    @staticmethod
    def _merge_source(value: Any, event: Any) -> dict[Any, Any]:
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise _ConstructorError(None, None, "a merge key takes a mapping or a list of mappings", event.start_mark)
        merged: dict[Any, Any] = {}
        for source in reversed(sources):
            merged.update(source)
        return merged

    def _scalar(self, event: Any) -> Any:
        plain, _ = event.implicit
        if event.tag is None or event.tag == "!":
            if not plain:
                return event.value
            known = _PLAIN_VALUES.get(event.value, _UNKNOWN)
            if known is not _UNKNOWN:
                return known
            try:
                return self._plain_cache[event.value]
            except KeyError:
                pass
            tag = self._loader.resolve(yaml.ScalarNode, event.value, (True, False))
            value = self._construct_scalar(tag, event)
            self._plain_cache[event.value] = value
            if len(event.value) <= _PLAIN_VALUE_LENGTH and len(_PLAIN_VALUES) < _PLAIN_VALUES_LIMIT:
                _PLAIN_VALUES[event.value] = value
            return value
        return self._construct_scalar(event.tag, event)

    def _construct_scalar(self, tag: str, event: Any) -> Any:
        if tag == _STR_TAG:
            return event.value
        if tag == _MERGE_TAG:
            return "<<"
        constructor = self._loader.yaml_constructors.get(tag)
        if constructor is None:
            raise _ConstructorError(None, None, f"unsupported tag {tag!r}", event.start_mark)
        try:
            value = constructor(self._loader, yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark))
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, LookupError, OverflowError) as exc:
            # PyYAML's constructors trust their resolver: an explicit tag on a malformed value, a date
            # that does not exist or an integer of thousands of digits fails inside Python's own parsers.
            raise _ConstructorError(None, None, _unreadable_scalar(event.value, tag, exc), event.start_mark) from None
        if type(value) is int and value.bit_length() > INTEGER_BITS:
            raise _ConstructorError(None, None, _unreadable_scalar(event.value, tag, f"more than {INTEGER_BITS} bits"), event.start_mark)
        return value

    @staticmethod
    def _check_tag(event: Any, default: str) -> None:
        if event.tag not in (None, "!", default):
            raise _ConstructorError(None, None, f"unsupported tag {event.tag!r}", event.start_mark)

    def _remember(self, event: Any, value: Any) -> None:
        if event.anchor is not None:
            self._anchors[event.anchor] = value


def _unreadable_scalar(value: str, tag: str, error: Exception | str) -> str:
    shown = value if len(value) <= 40 else value[:37] + "..."
    reason = str(error).split(";")[0].split(": ")[0] if isinstance(error, (ValueError, str)) else ""
    return f"{shown!r} is not a valid {tag.rpartition(':')[2]}" + (f" ({reason})" if reason else "")


def _render_marked(source: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if mark is None:
        return f"{source}: {problem}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: {problem}"


def mark_of(root: yaml.Node | None, path: Sequence[str | int], *, key: bool = False) -> tuple[int, int] | None:
    """(line, column), 1-based, of the deepest node along `path` that exists in the tree.

    With `key`, the last step stops at the mapping key rather than its value (for unknown keys).
    """
    node = root
    best = node.start_mark if node is not None else None
    for depth, part in enumerate(path, start=1):
        found = _child(node, part)
        if found is None:
            break
        key_node, node = found
        best = (key_node if key and depth == len(path) and key_node is not None else node).start_mark
    return (best.line + 1, best.column + 1) if best is not None else None


def _child(node: yaml.Node | None, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return key_node, value_node
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None


def dump(data: Any) -> str:
    """`data` as PyYAML's block emitter writes it, event by event, with each distinct string's quoting decided once."""
    stream = io.StringIO()
    dumper = _SafeDumper(stream, allow_unicode=True, width=100, default_flow_style=False, sort_keys=False)
    try:
        dumper.emit(yaml.StreamStartEvent())
        dumper.emit(yaml.DocumentStartEvent(explicit=False))
        _emit_value(dumper, data, {})
        dumper.emit(yaml.DocumentEndEvent(explicit=False))
        dumper.emit(yaml.StreamEndEvent())
    finally:
        dumper.dispose()
    return stream.getvalue()


def _emit_value(dumper: Any, value: Any, quoting: dict[str, bool]) -> None:
    if isinstance(value, dict):
        dumper.emit(yaml.MappingStartEvent(None, None, True, flow_style=False))
        for key, item in value.items():
            _emit_value(dumper, key, quoting)
            _emit_value(dumper, item, quoting)
        dumper.emit(yaml.MappingEndEvent())
    elif isinstance(value, (list, tuple)):
        dumper.emit(yaml.SequenceStartEvent(None, None, True, flow_style=False))
        for item in value:
            _emit_value(dumper, item, quoting)
        dumper.emit(yaml.SequenceEndEvent())
    elif isinstance(value, str):
        plain = quoting.get(value)
        if plain is None:
            plain = quoting[value] = dumper.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG
        dumper.emit(yaml.ScalarEvent(None, None, (plain, True), value))
    else:
        dumper.emit(yaml.ScalarEvent(None, None, (True, False), _plain_scalar(dumper, value)))


def _plain_scalar(dumper: Any, value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float)):
        node = dumper.represent_data(value)
        return node.value  # type: ignore[no-any-return]
    raise yaml.representer.RepresenterError(f"cannot represent an object of type {type(value).__name__}", value)
