"""The garbage collector while a command loads."""

from __future__ import annotations

import gc

__all__ = ["pause", "resume"]

_paused = False


def pause() -> bool:
    """Stop the garbage collector while the command loads; False when it was already stopped.

    Loading a command creates tens of thousands of objects that live as long as the process (modules,
    the document models' validators, the rules) and no garbage; collecting over and over while they
    are created costs about a fifth of the CPU of validating a small checkpoint."""
    global _paused
    _paused = gc.isenabled()
    gc.disable()
    return _paused


def resume() -> None:
    """Collect again, the loaded objects moved out of the collector's sight: nothing the command
    frees is among them, and an audit then scans only what each checkpoint allocates."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
