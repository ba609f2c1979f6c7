"""A pickle payload for the safety tests: unpickled by a real unpickler, it runs a shell command."""

from __future__ import annotations

import os
from collections.abc import Callable


class SystemCall:
    """Pickles as `os.system(command)`; tests point `command` at a marker file that must never appear."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
        return os.system, (self.command,)
