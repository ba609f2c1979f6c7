"""Words for what a path leads to when it is neither a regular file nor a directory. Imports nothing
of ckptspec, so the documents and the readers name such files the same way."""

from __future__ import annotations

import stat

__all__ = ["special_file_kind"]

_SPECIAL_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(mode: int) -> str:
    """`a FIFO (named pipe)`, `a socket`, ... for the `st_mode` of a file that is not a regular one."""
    return next((name for is_kind, name in _SPECIAL_FILE_KINDS if is_kind(mode)), "a special file")
