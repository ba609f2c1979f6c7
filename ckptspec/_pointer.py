"""RFC 6901 JSON Pointers, the `at:` and finding locations of ckptspec, and the YAML-style paths
into its documents. Imports nothing, so the readers and the error classes may use it too."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["document_path", "escape_segment", "join_pointer", "split_pointer"]


def escape_segment(segment: str) -> str:
    """One reference token: `~` → `~0`, `/` → `~1`."""
    return segment.replace("~", "~0").replace("/", "~1")


def join_pointer(parts: Iterable[str | int]) -> str:
    """A pointer from path parts: ('optimizer_states', 0) → '/optimizer_states/0'."""
    return "".join("/" + escape_segment(str(part)) for part in parts)


def split_pointer(pointer: str) -> list[str]:
    """The unescaped reference tokens of `pointer`; '' is the root, with none."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"{pointer!r} is not a JSON Pointer")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def document_path(parts: Iterable[str | int]) -> str:
    """Keys and indices into a YAML document, the way its reader finds them: `components.optimizer[0].type`."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
