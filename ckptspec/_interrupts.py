"""Ctrl-C during a save: noted when it arrives, raised where the files are consistent.

Python raises `KeyboardInterrupt` wherever the main thread happens to be when it checks for
signals: in the middle of a cleanup, between two renames of one commit, or inside a finalizer
that the garbage collector runs, where the exception is printed and lost. While `held()` is in
force, SIGINT's default handler is replaced by one that only notes the signal; the save asks
`interrupted()` where it can stop (its writer then drops what torch.save still hands over),
raises with `raise_if_interrupted()` before anything is committed, and `held()` raises the
interrupt on its way out, once the files hold a pair again, whatever the save did meanwhile.

Only the main thread (the one that receives signals) holds it. The program's own handler, if it
installed one, is called once the save is done, and keeps deciding what Ctrl-C does.
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
_stops = True
"""Whether Ctrl-C stops the save: it raises `KeyboardInterrupt` (no handler of the program's own)."""


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT until the end of the block (see the module docstring)."""
    global _depth, _stops
    if _depth:
        yield
        return
    try:
        previous = signal.signal(signal.SIGINT, _note)
    except ValueError:  # not the main thread: signals are not delivered here
        yield
        return
    _noted.clear()
    _stops = previous in (signal.default_int_handler, signal.SIG_DFL, None)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.signal(signal.SIGINT, previous)
        if _noted.is_set():
            _noted.clear()
            _deliver(previous)


def _deliver(handler: object) -> None:
    """What SIGINT would have done had it not been held: the program's handler decides."""
    if handler is signal.SIG_IGN:
        return
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, None)
        return
    raise KeyboardInterrupt  # chained to whatever else ended the save


def interrupted() -> bool:
    """Whether Ctrl-C was pressed during the save, is not raised yet, and stops the save."""
    return _stops and _noted.is_set()


def raise_if_interrupted() -> None:
    """Raise the noted `KeyboardInterrupt` now (the save has nothing to undo, or will undo it)."""
    if interrupted():
        _noted.clear()
        raise KeyboardInterrupt


def _note(signum: int, frame: FrameType | None) -> None:
    _noted.set()
