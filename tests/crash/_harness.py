"""The test side of `_zygote.py`: one child per adapter, asked to save, be killed and resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ZYGOTE = Path(__file__).with_name("_zygote.py")


class Child:
    """`_zygote.py ADAPTER DIRECTORY`, answering one request at a time."""

    def __init__(self, adapter: str, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), adapter, str(directory)],
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
