"""Run the CLI as an operator would at intake: a process of its own, its address space capped at
256 MiB, and a timeout that turns a hang into a failure rather than a stuck suite."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ADDRESS_SPACE = 256 << 20
HANG_GUARD_S = 120


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_limited(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`ckptspec ARGS` under RLIMIT_AS; what it printed, and its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "ckptspec", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        preexec_fn=_cap_address_space,
        cwd=cwd,
        check=False,
    )


def assert_judged(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a run that ended with a verdict of ckptspec's own: no traceback, no crash."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert "internal error" not in output and "CKS009" not in output, output
    assert "MemoryError" not in output, output
    return output
