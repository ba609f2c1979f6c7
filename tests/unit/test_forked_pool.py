"""The audit's forked workers: every checkpoint judged once, a dying worker reported, Ctrl-C ends them all."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ckptspec._forked_pool import judged_in_workers
from ckptspec._result import Result

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked")

PATHS = [Path(f"checkpoint-{number}.ckpt") for number in range(150)]


def _judged(path: Path) -> Result:
    return Result(checkpoint=str(path), format="torch", manifest=None, spec=None, findings=[])


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process ids of the workers the test forks (other tests' processes are not its business)."""
    pids: list[int] = []
    fork = os.fork

    def recorded() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded)
    return pids


def _all_reaped(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return bool(pids)


@pytest.mark.parametrize("jobs", [2, 3])
def test_every_checkpoint_is_judged_once_by_the_parent_and_its_workers(jobs: int, forked: list[int]) -> None:
    parent = os.getpid()

    def judge(path: Path) -> Result:
        result = _judged(path)
        result.format = "parent" if os.getpid() == parent else "worker"
        return result

    results = list(judged_in_workers(PATHS, judge, jobs))
    assert sorted(path for path, _ in results) == sorted(PATHS)
    assert all(result.checkpoint == str(path) for path, result in results)
    assert {result.format for _, result in results} == {"parent", "worker"}
    assert _all_reaped(forked)


def test_a_worker_that_dies_leaves_its_checkpoint_reported_and_the_rest_judged(forked: list[int]) -> None:
    parent = os.getpid()
    fatal = PATHS[0]  # workers take from the front of the list

    def judge(path: Path) -> Result:
        if path == fatal and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return _judged(path)

    results = dict(judged_in_workers(PATHS, judge, 2))
    assert sorted(results) == sorted(PATHS)
    [finding] = results[fatal].findings
    assert finding.message == "validation crashed: the worker process judging it was killed by signal SIGKILL"
    assert all(not result.findings for path, result in results.items() if path != fatal)
    assert _all_reaped(forked)


def test_an_interrupt_in_the_parent_stops_every_worker(forked: list[int]) -> None:
    parent = os.getpid()
    judged = []

    def judge(path: Path) -> Result:
        if os.getpid() == parent:
            judged.append(path)
            if len(judged) == 3:
                raise KeyboardInterrupt
        return _judged(path)

    with pytest.raises(KeyboardInterrupt):
        list(judged_in_workers(PATHS, judge, 3))
    assert _all_reaped(forked)


def test_without_processes_to_fork_the_parent_judges_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    results = list(judged_in_workers(PATHS, _judged, 2))
    assert [path for path, _ in results] == PATHS[::-1]
