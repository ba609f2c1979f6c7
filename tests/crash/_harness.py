"""The test side of `_zygote.py`: one child per adapter, asked to save, be killed and resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ZYGOTE = Path(__file__).with_name("_zygote.py")


MOUNTED = 'mount -t tmpfs -o size="$0" tmpfs "$1" && shift && exec "$@"'
"""Run the rest of the command line with a tmpfs of size $0 mounted at $1 (in a mount namespace of its own)."""


def tmpfs_allowed(place: Path) -> bool:
    """Whether this process may mount a tmpfs in a mount namespace of its own (root, or a user namespace that allows it)."""
    place.mkdir(parents=True, exist_ok=True)
    try:
        probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNTED, "64k", str(place), "true"], capture_output=True)
    except FileNotFoundError:
        return False
    return probe.returncode == 0


class Child:
    """`_zygote.py ADAPTER DIRECTORY`, answering one request at a time; with `disk`, on a tmpfs of
    that many bytes mounted at DIRECTORY's parent, which only the child sees."""

    def __init__(self, adapter: str, directory: Path, *, disk: int | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(ZYGOTE), adapter, str(directory)]
        if disk is not None:
            answer = directory.parent.with_name(f"{directory.parent.name}.answer.json")
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNTED, str(disk), str(directory.parent), *command, str(answer)]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"},
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        assert line, f"the child ended on {request}"
        return json.loads(line)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=60)
