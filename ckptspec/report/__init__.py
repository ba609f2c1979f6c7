"""Renderers of a validation `Report`: one function per format, chosen by name.

`REPORTER_BY_NAME` supplies both the CLI's `--format` choices and the dispatch, so adding a format
is one entry. A renderer's module is imported when it is first looked up: a command that writes
text does not load the XML library of the JUnit renderer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._result import Report
    from .json_ import render_json
    from .junit import render_junit
    from .markdown import render_markdown
    from .sarif import render_sarif
    from .text import render_text

__all__ = ["REPORTER_BY_NAME", "render_json", "render_junit", "render_markdown", "render_sarif", "render_text"]

_MODULE_BY_RENDERER = {
    "render_text": ".text",
    "render_json": ".json_",
    "render_junit": ".junit",
    "render_sarif": ".sarif",
    "render_markdown": ".markdown",
}


class _Reporters(Mapping[str, "Callable[[Report], str]"]):
    """Format name → renderer, each imported on first lookup."""

    def __getitem__(self, name: str) -> Callable[[Report], str]:
        renderer = f"render_{name}"
        if renderer not in _MODULE_BY_RENDERER:
            raise KeyError(name)
        return __getattr__(renderer)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return (renderer.removeprefix("render_") for renderer in _MODULE_BY_RENDERER)

    def __len__(self) -> int:
        return len(_MODULE_BY_RENDERER)


REPORTER_BY_NAME: Mapping[str, Callable[[Report], str]] = _Reporters()


def __getattr__(name: str) -> Any:
    module = _MODULE_BY_RENDERER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_BY_RENDERER))
