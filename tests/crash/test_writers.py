"""Two processes saving one checkpoint take turns: the second waits for the first's lock, so the
pair on disk is always one writer's checkpoint with that writer's manifest, never a mix.

The race is made deterministic: the first writer stalls between the swap of its checkpoint and
the rename of its manifest (the moment a mixed pair would form) until the test lets it go, and it
is let go only once the kernel lists the second writer as waiting on the lock (`/proc/locks`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptspec import validate
from ckptspec._commit import lock_path_for
from ckptspec._sidecars import manifest_path_for

torch = pytest.importorskip("torch")
from ckptspec.torch import RestoreNote  # noqa: E402

WRITER = """
import sys
from pathlib import Path

import torch

import ckptspec.torch as ckpt
from ckptspec import _atomic

path, value, release = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if release != "-":
    swap = _atomic.Staged.swap

    def stalled_swap(self):
        swap(self)
        if self.target != path:  # the pending record's own swap
            return
        print("swapped", flush=True)
        with open(release) as fifo:  # opening blocks until the test opens it to write
            fifo.read()

    _atomic.Staged.swap = stalled_swap
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
with torch.no_grad():
    for parameter in model.parameters():
        parameter.fill_(value)
ckpt.save(path, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
print("saved", flush=True)
"""


def _writer(path: Path, value: float, release: Path | None) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", WRITER, str(path), str(value), str(release or "-")]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _waiting_on(lock: Path, pid: int) -> bool:
    """Whether the kernel lists `pid` as blocked on the lock of the file `lock` (`->` in /proc/locks)."""
    try:
        inode = f":{os.stat(lock).st_ino} "
    except FileNotFoundError:
        return False
    with open("/proc/locks") as locks:
        return any("->" in line and f" {pid} " in line and inode in line for line in locks)


def _restored(path: Path) -> float:
    import ckptspec.torch as ckpt

    model = torch.nn.Linear(4, 2)
    ckpt.restore(path, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return float(model.weight[0, 0].detach())


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="the kernel's lock table is not readable here")
def test_a_second_writer_waits_for_the_first_so_the_pair_is_never_mixed(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    release = tmp_path / "release"
    os.mkfifo(release)
    first = _writer(checkpoint, 1.0, release)
    assert first.stdout is not None and first.stdout.readline() == "swapped\n"
    # The first writer's checkpoint is in place and its manifest is still the pending record: the
    # pair validates, and a resume gets the first writer's state.
    assert validate(checkpoint).passed
    with pytest.warns(RestoreNote, match="a save or a removal of it was interrupted"):
        assert _restored(checkpoint) == 1.0
    second = _writer(checkpoint, 2.0, None)
    lock = lock_path_for(checkpoint)
    while not _waiting_on(lock, second.pid):
        assert second.poll() is None, "the second writer ended while the first held the lock"
        time.sleep(0.05)
    with open(release, "w"):
        pass
    assert first.wait(timeout=120) == 0 and second.wait(timeout=120) == 0
    assert second.stdout is not None and second.stdout.read() == "saved\n"
    result = validate(checkpoint)
    assert result.passed, [finding.message for finding in result.errors]
    assert manifest_path_for(checkpoint).is_file()
    assert _restored(checkpoint) == 2.0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.pt", "model.pt.ckptspec.yaml", "release"]
