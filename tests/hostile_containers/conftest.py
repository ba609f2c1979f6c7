"""Each hostile container judged by the real command line in a child process under a 256 MiB address
space limit and a hang guard (a subprocess timeout), and the real loaders shown to run the payloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MEMORY_LIMIT = 256 << 20
HANG_GUARD_SECONDS = 240
"""The whole batch's wall-clock limit: far beyond its few seconds, it only stops a hang."""

_JUDGE_EACH = textwrap.dedent(
    """
    import contextlib, io, json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
    from ckptspec.cli import main

    verdicts = {}
    for path in sys.argv[2:]:
        for command in ("audit", "validate", "inspect"):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main([command, path, "--format", "json"])
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException as exc:  # a crash is what the test reports, not what stops the batch
                    code, err = -1, io.StringIO(f"Traceback: {type(exc).__name__}: {exc}")
            verdicts[f"{command} {path}"] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    print(json.dumps(verdicts))
    """
)


def judge_all(paths: list[Path]) -> dict[tuple[str, Path], dict]:
    """`audit`, `validate` and `inspect` (`--format json`) of every path, in one child process whose
    address space is `MEMORY_LIMIT`: exit code, standard output and error of each."""
    completed = subprocess.run(
        [sys.executable, "-c", _JUDGE_EACH, str(MEMORY_LIMIT), *map(str, paths)],
        capture_output=True, text=True, timeout=HANG_GUARD_SECONDS, check=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    verdicts = json.loads(completed.stdout)
    return {(key.split(" ", 1)[0], Path(key.split(" ", 1)[1])): verdict for key, verdict in verdicts.items()}


def run_loader(script: str, *arguments: object) -> None:
    """Run `script` (a real loader) in a child process; whether its payload ran is told by the marker."""
    subprocess.run([sys.executable, "-c", script, *map(str, arguments)], capture_output=True, timeout=120, check=False,
                   stdin=subprocess.DEVNULL)  # fmt: skip
