"""Renderers of a validation `Report`: one function per format, chosen by name.

`REPORTER_BY_NAME` supplies both the CLI's `--format` choices and the dispatch, so adding a format
is one entry.
"""

from collections.abc import Callable

from .._validate import Report
from .json_ import render_json
from .junit import render_junit
from .markdown import render_markdown
from .sarif import render_sarif
from .text import render_text

__all__ = ["REPORTER_BY_NAME", "render_json", "render_junit", "render_markdown", "render_sarif", "render_text"]

REPORTER_BY_NAME: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "junit": render_junit,
    "sarif": render_sarif,
    "markdown": render_markdown,
}
