"""Run `ckptspec` where file permissions bite: root ignores them, so as root the child runs in a user
namespace that maps it to an ordinary user (`unshare --user`); the test is skipped where that is refused."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import pytest

_UNSHARE = ["unshare", "--user", "--map-user=1000"]


def run_ckptspec_unprivileged(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "ckptspec", *arguments]
    if os.geteuid() == 0:
        if not _user_namespaces_work():
            pytest.skip("running as root and `unshare --user` is not available to drop the privilege")
        command = [*_UNSHARE, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@functools.cache
def _user_namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*_UNSHARE, "true"], capture_output=True).returncode == 0
