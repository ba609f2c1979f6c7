"""The block YAML ckptspec writes, read and written without PyYAML.

A manifest, and a spec as `ckptspec spec init` writes it, hold mappings, lists and short simple
scalars. `BlockText` writes such a document line by line, as PyYAML's block emitter would write it;
`read_block` reads the text back, line by line, as PyYAML's safe loader would read it. Anything
else in a text (anchors, tags, quoted escapes, folded or multi-line scalars, complex keys, a
duplicate key, a value PyYAML would take for a date) raises `NotSimple`, and the caller hands the
text to PyYAML (`ckptspec._yaml_events`), whose values and errors are the reference. The plain
scalars resolve by PyYAML's own table of implicit types (`_IMPLICIT`), copied here, so a string is
taken for a string exactly where PyYAML takes it for one.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["ALIAS_NODE_LIMIT", "INTEGER_BITS", "NESTING_LIMIT", "BlockText", "NotSimple", "read_block", "resolves_to_string"]

NESTING_LIMIT = 100
"""Mappings and sequences nested deeper than this are refused: the deepest part of a manifest, its
hyper-parameters, is recorded to 64 levels, and the reader must not exhaust the stack on a hostile one."""

INTEGER_BITS = 1024
"""No size, count, step or seed of a checkpoint needs more; Python will not even print an integer of
more than 4300 digits, which a hexadecimal or sexagesimal one of a few kilobytes reaches."""

ALIAS_NODE_LIMIT = 100_000
"""How many nodes all aliases of one document may stand for together: anchors that save repeating a
block are fine, nested aliases that multiply (a 'billion laughs' document) are refused."""

_IMPLICIT = re.compile(
    r"""(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF
    |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
    |[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+
    |<<|~|null|Null|NULL|
    |[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
    |[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[\ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?
     (?:[\ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?
    |=)""",
    re.X,
)
"""What PyYAML's resolver takes a plain scalar for, when not for a string: its bool, float, int,
merge, null, timestamp and value patterns (yaml/resolver.py), one alternative each, in one pattern.
Each of PyYAML's patterns applies only to scalars starting with one of the characters its matches
start with, so a scalar that matches none of them here is a string there."""

_OUTSIDE = re.compile(r"[^\n\x20-\x7e]")
"""Characters the reader leaves to PyYAML: tabs, carriage returns, controls (which PyYAML refuses
anywhere, comments included) and everything beyond ASCII."""
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:e[-+][0-9]+)?")
_SPECIAL_FLOATS = {".inf": math.inf, "-.inf": -math.inf, "+.inf": math.inf, ".nan": math.nan}


_SIMPLE_STRING = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./+-]*(?::[A-Za-z0-9_./+-]+)*")
"""Strings PyYAML writes on one line, as they are or in single quotes, in any block context: no
space (where it would fold a long line), no indicator (`- `, `: `, `#`...) and no escape."""
_SIMPLE_KEY_LENGTH = 128
"""PyYAML writes a longer key as a complex key (`? key`)."""
_EMPTY = {dict: "{}", list: "[]", tuple: "[]"}
"""How PyYAML writes an empty mapping or list in a block."""


class NotSimple(Exception):
    """The document holds a value `BlockText` does not write the way PyYAML would, or the text
    holds what `read_block` does not read."""


class BlockText:
    """The text PyYAML's block emitter writes for documents of mappings, lists and simple scalars.

    A mapping's entries are `key: value` at its indent, a nested mapping two columns further in, a
    list under a key at the key's own indent; a list item starts with `- ` and its first line holds
    the item's first line (`- name: x`, `- - 1`). Containers and scalars of exact built-in types only."""

    def document(self, data: Any) -> str:
        if type(data) not in _EMPTY:
            raise NotSimple
        lines: list[str] = []
        self._container(data, 0, lines)
        return "\n".join(lines) + "\n"

    def _container(self, value: Any, indent: int, lines: list[str]) -> None:
        if not value:
            lines.append(" " * indent + _EMPTY[type(value)])
        elif type(value) is dict:
            self._mapping(value, indent, lines)
        else:
            self._sequence(value, indent, lines)

    def _sequence(self, items: Any, indent: int, lines: list[str]) -> None:
        dash = " " * indent + "- "
        for item in items:
            if type(item) in _EMPTY:
                start = len(lines)
                self._container(item, indent + 2, lines)
                lines[start] = dash + lines[start][indent + 2 :]
            else:
                lines.append(dash + _simple_scalar(item))

    def _mapping(self, mapping: dict[Any, Any], indent: int, lines: list[str]) -> None:
        margin = " " * indent
        for key, value in mapping.items():
            if type(key) is not str or not key or len(key) >= _SIMPLE_KEY_LENGTH:
                raise NotSimple
            head = margin + _simple_string(key) + ":"
            kind = type(value)
            if kind not in _EMPTY:
                lines.append(f"{head} {_simple_scalar(value)}")
            elif not value:
                lines.append(f"{head} {_EMPTY[kind]}")
            else:
                lines.append(head)
                if kind is dict:
                    self._mapping(value, indent + 2, lines)
                else:
                    self._sequence(value, indent, lines)


def _simple_scalar(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return _simple_string(value) if value else "''"
    if kind is int:
        return str(value)
    if kind is float:
        return _float_text(value)
    if value is None or kind is bool:
        return _CONSTANTS[value]
    raise NotSimple


_CONSTANTS = {None: "null", True: "true", False: "false"}
_CONSTANTS_READ = {text: value for value, text in _CONSTANTS.items()}


def _float_text(value: float) -> str:
    """PyYAML's `represent_float`: repr, lower case, `.0` before an exponent that lacks a point."""
    if value != value:
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value).lower()
    return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text


_written: dict[str, str] = {}
"""The written form of each short simple string met so far: a model's names repeat save after save."""
_WRITTEN_LIMIT = 1 << 16
_WRITTEN_LENGTH = 256
"""Longer strings are not kept: the cache holds some 32 MiB at most, whatever the documents written."""


def _simple_string(value: str) -> str:
    written = _written.get(value)
    if written is None:
        if not _SIMPLE_STRING.fullmatch(value):
            raise NotSimple
        written = value if resolves_to_string(value) else f"'{value}'"
        if len(_written) < _WRITTEN_LIMIT and len(value) <= _WRITTEN_LENGTH:
            _written[value] = written
    return written


def resolves_to_string(plain: str) -> bool:
    """Whether PyYAML's safe loader takes `plain`, written unquoted, for a string."""
    return _IMPLICIT.fullmatch(plain) is None


def read_block(text: str) -> Any:
    """The data of `text` as `yaml.safe_load` gives it, for the block YAML `BlockText` writes
    (comments and blank lines, flow lists of scalars and double quotes allowed too); raises
    `NotSimple` for any other text."""
    if _OUTSIDE.search(text):
        raise NotSimple
    lines = [(len(line) - len(line.lstrip(" ")), stripped) for line in text.split("\n") if (stripped := line.strip(" ")) and stripped[0] != "#"]
    if not lines:
        raise NotSimple  # an empty document: PyYAML decides what it is
    if len(lines) == 1 and lines[0] in ((0, "{}"), (0, "[]")):
        return {} if lines[0][1] == "{}" else []
    reader = _Reader(lines)
    value = reader.node(0, lines[0][0], 0)
    if reader.at != len(lines):
        raise NotSimple
    return value


class _Reader:
    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.lines = lines
        self.at = 0
        self._first: tuple[str, str] | None = None
        """The first entry of the mapping a list item starts, read already by `_sequence`."""

    def node(self, index: int, indent: int, depth: int) -> Any:
        if depth >= NESTING_LIMIT - 1:  # room for one more level, a flow list or `{}` inside
            raise NotSimple
        self.at = index
        line = self.lines[index][1]
        return self._sequence(indent, depth) if line.startswith("- ") else self._mapping(indent, depth)

    def _sequence(self, indent: int, depth: int) -> list[Any]:
        items: list[Any] = []
        lines = self.lines
        while self.at < len(lines) and lines[self.at][0] == indent and lines[self.at][1].startswith("- "):
            rest = lines[self.at][1][2:]
            nested = rest.startswith("- ")
            self._first = None if nested else _entry(rest)
            if nested or self._first is not None:
                lines[self.at] = (indent + 2, rest)  # the item's first line, at the item's indent
                items.append(self.node(self.at, indent + 2, depth + 1))
            else:
                items.append(_value(rest))
                self.at += 1
        self._ended(indent)
        return items

    def _mapping(self, indent: int, depth: int) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        lines = self.lines
        entry, self._first = self._first, None
        while self.at < len(lines) and lines[self.at][0] == indent and not lines[self.at][1].startswith("- "):
            entry = entry or _entry(lines[self.at][1])
            if entry is None:
                raise NotSimple
            key, rest = entry
            entry = None
            if key in mapping:
                raise NotSimple  # PyYAML's loader names the duplicate
            self.at += 1
            if rest:
                mapping[key] = _value(rest)
                continue
            if self.at == len(lines):
                raise NotSimple
            inner, line = lines[self.at]
            if inner > indent or (inner == indent and line.startswith("- ")):
                mapping[key] = self.node(self.at, inner, depth + 1)
            else:
                raise NotSimple  # `key:` alone is null: PyYAML decides
        self._ended(indent)
        return mapping

    def _ended(self, indent: int) -> None:
        """A container ends where the next line is less indented (or at the end); a line further
        in than its container is a continuation or a syntax error, and PyYAML decides."""
        if self.at < len(self.lines) and self.lines[self.at][0] > indent:
            raise NotSimple


def _entry(line: str) -> tuple[str, str] | None:
    """`key: rest` split into the key read and the rest, or None when `line` is no simple mapping entry."""
    if line[0] in "'\"":
        end = _closing_quote(line)
        if end < 0 or line[end + 1 : end + 2] != ":":
            return None
        key, rest = _quoted(line[: end + 1]), line[end + 2 :]
    else:
        colon = line.find(": ")
        if colon < 0:
            if not line.endswith(":"):
                return None
            colon = len(line) - 1
        key, rest = line[:colon], line[colon + 1 :]
        if _read.get(key) != key and _plain(key) != key:
            raise NotSimple  # a key PyYAML would not take for a string
    if rest and rest[0] != " ":
        raise NotSimple
    if len(key) >= _SIMPLE_KEY_LENGTH:
        raise NotSimple
    return key, rest.strip(" ")


def _value(text: str) -> Any:
    """A scalar, `{}`, `[]` or a flow list of scalars, written after `key: ` or `- `."""
    if text[0] == "[" and text[-1:] == "]":
        inner = text[1:-1].strip(" ")
        return [_flow_item(item.strip(" ")) for item in inner.split(",")] if inner else []
    if text == "{}":
        return {}
    return _scalar(text)


def _flow_item(text: str) -> Any:
    if ":" in text:
        raise NotSimple  # where a colon ends a plain scalar differs inside brackets
    return _scalar(text)


def _scalar(text: str) -> Any:
    known = _read.get(text, _UNREAD)
    if known is not _UNREAD:
        return known
    if not text:
        raise NotSimple
    if text[0] in "'\"":
        return _quoted(text)
    return _plain(text)


def _plain(text: str) -> Any:
    """The value of a plain scalar, remembered for the next document; `NotSimple` for one PyYAML
    would take for a date, a merge key, a non-decimal integer and the like."""
    if text in _CONSTANTS_READ:
        value = _CONSTANTS_READ[text]
    elif _SIMPLE_STRING.fullmatch(text) and resolves_to_string(text):
        value = text
    elif _INTEGER.fullmatch(text):
        if len(text) > INTEGER_BITS // 3:  # longer than any integer of INTEGER_BITS: PyYAML refuses it
            raise NotSimple
        value = int(text)
    elif _FLOAT.fullmatch(text):
        value = float(text)
    elif text in _SPECIAL_FLOATS:
        value = _SPECIAL_FLOATS[text]
    else:
        raise NotSimple
    if len(text) <= _READ_LENGTH and len(_read) < _READ_LIMIT:
        _read[text] = value
    return value


_read: dict[str, Any] = {}
"""Short plain scalars read already, with their values (all immutable), shared by every document a
process reads: manifests repeat their keys, dtypes and roles."""
_READ_LIMIT = 4096
_READ_LENGTH = 64
_UNREAD = object()


def _quoted(text: str) -> str:
    """A string quoted on one line: between single quotes, `''` stands for a quote and nothing
    else is escaped; between double quotes, one without a backslash."""
    quote, inner = text[0], text[1:-1]
    if len(text) < 2 or text[-1] != quote:
        raise NotSimple
    if quote == '"':
        if '"' in inner or "\\" in inner:
            raise NotSimple
        return inner
    if "'" in inner.replace("''", ""):
        raise NotSimple
    return inner.replace("''", "'")


def _closing_quote(line: str) -> int:
    """Where the quoted scalar `line` starts with ends; -1 when it does not end on this line."""
    if line[0] == '"':
        return line.find('"', 1)
    end = line.find("'", 1)
    while end >= 0 and line[end + 1 : end + 2] == "'":
        end = line.find("'", end + 2)
    return end
