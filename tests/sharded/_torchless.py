"""Run the ckptspec command line in a process where torch, numpy and tensorflow cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_BLOCK_TORCH = """
import runpy, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "numpy", "tensorflow"}:
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Blocked())
sys.argv = ["ckptspec", *sys.argv[1:]]
runpy.run_module("ckptspec", run_name="__main__")
"""


def without_torch(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH, *map(str, arguments)], capture_output=True, text=True, env=environment, timeout=300
    )
