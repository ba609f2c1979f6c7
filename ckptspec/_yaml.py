"""Safe YAML in and out.

Loading reads the block YAML ckptspec writes line by line without PyYAML (`_yaml_block`), and
hands any other text to PyYAML's safe loader (`_yaml_events`), which composes it from the
libyaml-backed parser's events when available, rejects duplicate keys and bounds nesting and
aliases. The data are those `yaml.safe_load` gives either way. An error is pointed at its line
and column from the node tree, composed only when one needs it. Dumping is deterministic (the
order of the data, never sorted).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataclass import dataclass
from ._exceptions import YAMLSyntaxError
from ._yaml_block import ALIAS_NODE_LIMIT, NESTING_LIMIT, BlockText, NotSimple, read_block

if TYPE_CHECKING:
    import yaml

__all__ = ["ALIAS_NODE_LIMIT", "NESTING_LIMIT", "LoadedYAML", "dump_yaml", "load_yaml"]


@dataclass
class LoadedYAML:
    """Plain data from a YAML document, plus its text for locating errors."""

    data: Any
    source: str
    text: str

    @cached_property
    def root(self) -> yaml.Node | None:
        """The node tree, composed only when an error needs a line and column."""
        from ._yaml_events import compose

        return compose(self.text)

    def mark_of(self, path: Sequence[str | int], *, key: bool = False) -> tuple[int, int] | None:
        """(line, column), 1-based, of the deepest node along `path`; see `_yaml_events.mark_of`."""
        from ._yaml_events import mark_of

        return mark_of(self.root, path, key=key)


def load_yaml(text: str | bytes, source: str | Path = "<string>") -> LoadedYAML:
    """Parse one YAML document as the safe loader does; raise `YAMLSyntaxError` naming the place."""
    source = str(source)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YAMLSyntaxError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = read_block(text)
    except NotSimple:
        from ._yaml_events import load

        data = load(text, source)
    return LoadedYAML(data=data, source=source, text=text)


def dump_yaml(data: Any) -> str:
    """Deterministic block-style YAML: the data's own key order, unicode kept, no aliases.

    The same text `yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)` gives. A
    document whose strings are all simple (names, digests, versions, times: see `_SIMPLE_STRING`),
    as a manifest's are, is written line by line; any other goes through PyYAML's emitter, event by
    event, with each distinct string's quoting decided once.
    """
    with contextlib.suppress(NotSimple):
        return BlockText().document(data)
    from ._yaml_events import dump

    return dump(data)
