"""Text read from files, made safe to show: in a terminal, a log, a Markdown comment, an XML report.

A checkpoint's name, a tensor's key, a member of an archive or a run id is chosen by whoever wrote
the file. Printed as it is, an escape sequence rewrites the operator's terminal (or hides a line of
the report), a bidirectional mark shows a name other than the one on disk, a NUL makes a JUnit
report that no XML parser reads, and a `|` or a backtick breaks out of a Markdown table cell.
Every human-facing report passes such text through one of these functions; machine formats (JSON,
SARIF) are escaped by their encoders.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["markdown_code", "markdown_text", "printable"]

# Format characters that reorder or hide what is shown: bidi embeddings/overrides/isolates, zero-width
# joiners and spaces, the byte-order mark, the soft hyphen. Category Cf holds them all.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|!~&$#])")


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every character a reader cannot see as itself written as a Python-style escape.

    Control characters (C0, DEL, C1), format marks (bidi, zero-width), lone surrogates, private-use
    and unassigned code points become `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`; once any is, a backslash
    that would read as such an escape is doubled. With `newlines`, line breaks are kept (for messages
    of several lines); tabs and every other character stay as they are.
    """
    if all(_visible(character, newlines) for character in text):
        return text
    return "".join(_shown(character, newlines) for character in _backslashes_doubled(text))


def markdown_text(text: str) -> str:
    """`text` shown literally inside a Markdown paragraph or table cell (GitHub-flavoured)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", printable(text)).replace("\n", " ")


def markdown_code(text: str) -> str:
    """`text` as an inline code span that nothing in it can end, safe inside a table cell."""
    shown = printable(text).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def _backslashes_doubled(text: str) -> str:
    # Only a backslash that starts something looking like an escape is ambiguous once escapes appear.
    return re.sub(r"\\(?=[xuU])", r"\\\\", text)


def _visible(character: str, newlines: bool) -> bool:
    if character.isprintable() or character == "\t" or (newlines and character == "\n"):
        return True
    return unicodedata.category(character) not in _HIDDEN_CATEGORIES


def _shown(character: str, newlines: bool) -> str:
    if _visible(character, newlines):
        return character
    code = ord(character)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
