"""Ctrl-C during a save: noted when it arrives, raised where the files are consistent.

Python raises `KeyboardInterrupt` wherever the main thread happens to be when it checks for
signals: in the middle of a cleanup, between two renames of one commit, or inside a finalizer
that the garbage collector runs, where the exception is printed and lost. While `held()` is in
force, SIGINT's default handler is replaced by one that only notes the signal; the save asks
`interrupted()` where it can stop (its writer then drops what torch.save still hands over),
raises with `raise_if_interrupted()` before anything is committed, and `held()` raises the
interrupt on its way out, once the files hold a pair again, whatever the save did meanwhile.

Only the default handler is replaced, and only in the main thread (the one that receives
signals): a handler of the program's own keeps deciding what Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["held", "interrupted", "raise_if_interrupted"]

_noted = threading.Event()
_depth = 0


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT's `KeyboardInterrupt` until the end of the block (see the module docstring)."""
    global _depth
    if _depth or threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _noted.clear()
    signal.signal(signal.SIGINT, _note)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if _noted.is_set():
            _noted.clear()
            raise KeyboardInterrupt  # chained to whatever else ended the save


def interrupted() -> bool:
    """Whether Ctrl-C was pressed during the save and is not raised yet."""
    return _noted.is_set()


def raise_if_interrupted() -> None:
    """Raise the noted `KeyboardInterrupt` now (the save has nothing to undo, or will undo it)."""
    if _noted.is_set():
        _noted.clear()
        raise KeyboardInterrupt


def _note(signum: int, frame: FrameType | None) -> None:
    _noted.set()
