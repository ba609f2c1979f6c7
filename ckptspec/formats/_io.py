"""The one way the readers turn an operating-system error into a `ReaderError`."""

from __future__ import annotations

from pathlib import Path

from .._exceptions import ReaderError

__all__ = ["read_bytes", "unreadable"]


def unreadable(path: str | Path, error: OSError, *, item: str | None = None) -> ReaderError:
    """`PATH: cannot read: <strerror>`, or `PATH: ITEM: cannot read: ...` for one part of the file."""
    where = f"{path}: {item}" if item is not None else str(path)
    return ReaderError(f"{where}: cannot read: {error.strerror}")


def read_bytes(path: str | Path) -> bytes:
    """The whole file at `path`; a `ReaderError` naming it when it is missing or cannot be read."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ReaderError(f"{path}: no such file") from None
    except OSError as exc:
        raise unreadable(path, exc) from None
