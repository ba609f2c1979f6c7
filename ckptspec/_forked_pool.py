"""The audit's local processes: workers forked from this one, which judges checkpoints beside them.

A forked worker starts with everything this process has loaded, the judge and the list of
checkpoints included, so a batch is sent as the positions of its checkpoints in that list and
only results come back. `concurrent.futures`' process pool would cost more than the whole audit
of a few hundred small checkpoints does on one core: its imports alone take about a fifth of
that, and its parent only waits while its workers judge.

The workers take batches from the front of the list, the parent one checkpoint at a time from the
back, so the two meet wherever the work runs out and no one waits long for the last batch. A thread
of the parent hands out the batches and reads the results, so that the workers keep judging while
the parent does; each worker holds two batches, one it judges and the next.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import queue
import select
import signal
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from ._result import Judge, Result
from .checks import inputs

__all__ = ["judged_in_workers"]

_BATCH_LIMIT = 32
"""Checkpoints handed to a worker at once, at most: one large checkpoint holds back few others."""
_BATCHES_AHEAD = 2
_LENGTH = 8
"""The bytes of the length before each message on a pipe."""
_READ_BYTES = 1 << 20


def judged_in_workers(checkpoints: list[Path], judge: Judge, jobs: int) -> Iterator[tuple[Path, Result]]:
    """Each checkpoint's result under `judge`, in the order they are judged: by this process and up
    to `jobs - 1` forked workers (fewer when the system refuses more processes). A worker that dies
    (killed, or crashed in a library it called) leaves the checkpoint it was judging with an
    `internal-check-error` finding that says how it ended; the rest of its batches are judged by
    the others."""
    work = _Work(len(checkpoints), jobs)
    workers = _fork_workers(checkpoints, judge, min(jobs - 1, len(checkpoints)))
    dispatch = _Dispatch(workers, work, checkpoints)
    thread = threading.Thread(target=dispatch.run, name="ckptspec-audit-workers", daemon=True)
    thread.start()
    try:
        while True:
            index = work.take_one()
            if index is not None:
                yield checkpoints[index], judge(checkpoints[index])
            elif work.done():
                yield from dispatch.ready()
                return
            elif dispatch.failure is not None:
                raise RuntimeError(f"the audit's workers could not be kept track of: {dispatch.failure}")
            elif (answer := dispatch.results.get()) is not None:  # None: a worker gave back what it held, or all ended
                yield checkpoints[answer[0]], answer[1]
            yield from dispatch.ready()
    finally:
        work.stop()
        dispatch.stop()
        thread.join()
        for worker in workers:
            worker.end()


class _Work:
    """The positions of the checkpoints no one has taken yet, shared by the parent and its thread,
    and the number handed to workers and not yet answered."""

    def __init__(self, count: int, jobs: int) -> None:
        self._lock = threading.Lock()
        self._front, self._back = 0, count
        self._returned: list[int] = []
        self._jobs = jobs
        self._held = 0
        self._stopped = False

    def take_batch(self) -> list[int]:
        """The next checkpoints for a worker: fewer as the work runs out, so that all finish together."""
        with self._lock:
            if self._stopped:
                return []
            if self._returned:
                batch, self._returned = self._returned, []
            else:
                size = max(1, min(_BATCH_LIMIT, (self._back - self._front) // (self._jobs * 4)))
                batch = list(range(self._front, min(self._front + size, self._back)))
                self._front += len(batch)
            self._held += len(batch)
            return batch

    def take_one(self) -> int | None:
        with self._lock:
            if self._stopped:
                return None
            if self._returned:
                return self._returned.pop()
            if self._front == self._back:
                return None
            self._back -= 1
            return self._back

    def answered(self, count: int, returned: list[int] = []) -> None:  # noqa: B006 - never changed
        """`count` checkpoints held by workers are answered for, and `returned` are theirs to take again."""
        with self._lock:
            self._held -= count + len(returned)
            self._returned.extend(returned)

    def done(self) -> bool:
        """Whether every checkpoint was taken and every one a worker held is answered for."""
        with self._lock:
            return self._stopped or (self._front == self._back and not self._returned and not self._held)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True


class _Worker:
    """A forked worker as the parent sees it: its pipes, and the batches it holds, oldest first."""

    def __init__(self, pid: int, tasks: int, answers: int, judging: memoryview) -> None:
        self.pid = pid
        self.judging = judging
        """Where the worker writes the position of the checkpoint it judges, as it begins it."""
        self.tasks: int | None = tasks
        self.answers: int | None = answers
        self.held: deque[list[int]] = deque()
        self.received = bytearray()
        self.status: int | None = None

    def send(self, batch: list[int]) -> bool:
        """Hand `batch` over; False when the worker is gone."""
        assert self.tasks is not None
        try:
            _write_message(self.tasks, batch)
        except OSError:
            return False
        self.held.append(batch)
        return True

    def finish_sending(self) -> None:
        """Close the worker's tasks: it exits once it has judged what it holds."""
        if self.tasks is not None:
            os.close(self.tasks)
            self.tasks = None

    def answered(self) -> Iterator[list[tuple[int, Result]]]:
        """The results of each batch complete in what was received, oldest batch first."""
        for results in _messages_in(self.received):
            self.held.popleft()
            yield results

    def reap(self) -> None:
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)

    def end(self) -> None:
        """Stop the worker (at once, if it is still judging), collect its exit status, close its pipes."""
        self.finish_sending()
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # not reaped yet, so the process id is still its own
            self.reap()
        if self.answers is not None:
            os.close(self.answers)
            self.answers = None

    def death(self) -> str:
        status = self.status or 0
        if os.WIFSIGNALED(status):
            return f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
        return f"ended with exit status {os.WEXITSTATUS(status)}"


def _fork_workers(checkpoints: list[Path], judge: Judge, count: int) -> list[_Worker]:
    """Up to `count` workers; as many as the system allows processes and pipes for."""
    workers: list[_Worker] = []
    for _ in range(count):
        try:
            worker = _fork_worker(checkpoints, judge, workers)
        except OSError:
            break  # out of processes or descriptors: the workers started, and this process, judge everything
        workers.append(worker)
    return workers


def _fork_worker(checkpoints: list[Path], judge: Judge, others: list[_Worker]) -> _Worker:
    judging = memoryview(mmap.mmap(-1, _LENGTH)).cast("q")  # shared with the child it is mapped before
    judging[0] = -1
    pipes: list[int] = []
    try:
        pipes.extend(os.pipe())
        pipes.extend(os.pipe())
        tasks_read, tasks_write, answers_read, answers_write = pipes
        pid = os.fork()
    except OSError:
        for fd in pipes:
            os.close(fd)
        raise
    if pid == 0:
        # What the parent keeps open for the other workers would hold their pipes open.
        for fd in (tasks_write, answers_read, *(fd for other in others for fd in (other.tasks, other.answers) if fd is not None)):
            os.close(fd)
        _work(checkpoints, judge, tasks_read, answers_write, judging)
    os.close(tasks_read)
    os.close(answers_write)
    return _Worker(pid, tasks_write, answers_read, judging)


def _work(checkpoints: list[Path], judge: Judge, tasks: int, answers: int, judging: memoryview) -> NoReturn:
    """A worker's whole life: judge each batch it is sent and send back its results, until the
    parent closes its end; then exit without running what the parent registered to run at its own
    exit. Ctrl-C is the parent's to handle: it stops the workers.

    A batch is answered at once: a message per checkpoint would wake the parent's thread as often,
    and it would take a core from the judging each time. Which checkpoint is being judged goes
    to memory shared with the parent instead, for the report of a worker that dies."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        received = bytearray()
        while part := os.read(tasks, _READ_BYTES):
            received += part
            for batch in _messages_in(received):
                results = []
                for index in batch:
                    judging[0] = index
                    results.append((index, judge(checkpoints[index])))
                _write_message(answers, results)
        code = 0
    finally:
        os._exit(code)


def _write_message(fd: int, value: object) -> None:
    message = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(message).to_bytes(_LENGTH, "little") + message)
    while view:
        view = view[os.write(fd, view) :]


def _messages_in(received: bytearray) -> Iterator[Any]:
    """The messages complete in `received`, taken out of it; a partial one is left for more bytes."""
    while len(received) >= _LENGTH:
        length = int.from_bytes(received[:_LENGTH], "little")
        if len(received) < _LENGTH + length:
            return
        value = pickle.loads(received[_LENGTH : _LENGTH + length])  # written by this process or one it forked
        del received[: _LENGTH + length]
        yield value


class _Dispatch:
    """The parent's thread: keeps every worker two batches ahead, passes its results on as they
    come, and, when one dies, reports the checkpoint it was judging and gives back the rest."""

    def __init__(self, workers: list[_Worker], work: _Work, checkpoints: list[Path]) -> None:
        self.results: queue.SimpleQueue[tuple[int, Result] | None] = queue.SimpleQueue()
        """Each result, and None to wake the parent: when a worker died, and when all have ended."""
        self.failure: BaseException | None = None
        self._workers = workers
        self._work = work
        self._checkpoints = checkpoints
        self._stop_read, self._stop_write = os.pipe()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - raised in the parent, which waits on this thread
            self.failure = exc
        finally:
            os.close(self._stop_read)
            self.results.put(None)

    def _run(self) -> None:
        by_answers = {worker.answers: worker for worker in self._workers}
        for worker in self._workers:
            self._supply(worker)
        polled = select.poll()  # not select(): descriptors past 1023 are out of its range
        polled.register(self._stop_read, select.POLLIN)
        for fd in by_answers:
            polled.register(fd, select.POLLIN)
        while by_answers:
            for fd, _event in polled.poll():
                if fd == self._stop_read:
                    return
                worker = by_answers[fd]
                part = os.read(fd, _READ_BYTES)
                if part:
                    worker.received += part
                    for results in worker.answered():
                        for answer in results:
                            self.results.put(answer)
                        self._work.answered(len(results))
                    self._supply(worker)
                else:
                    polled.unregister(fd)
                    del by_answers[fd]
                    self._ended(worker)

    def _supply(self, worker: _Worker) -> None:
        while worker.tasks is not None and len(worker.held) < _BATCHES_AHEAD:
            batch = self._work.take_batch()
            if not batch:
                worker.finish_sending()
            elif not worker.send(batch):
                self._work.answered(0, batch)
                worker.finish_sending()

    def _ended(self, worker: _Worker) -> None:
        """The worker closed its end of the results: it exited, or died before judging all it held."""
        worker.finish_sending()
        worker.reap()
        if not worker.held:
            return
        left = [index for batch in worker.held for index in batch]
        # What it was judging, if it died judging: the rest of what it held is judged again elsewhere.
        if (index := worker.judging[0]) in worker.held[0]:
            left.remove(index)
            path = self._checkpoints[index]
            finding = inputs.InternalCheckError.finding(f"validation crashed: the worker process judging it {worker.death()}", checkpoint=str(path))
            self.results.put((index, Result(checkpoint=str(path), format=None, manifest=None, spec=None, findings=[finding])))
            self._work.answered(1)
        worker.held.clear()
        self._work.answered(0, left)
        self.results.put(None)

    def ready(self) -> Iterator[tuple[Path, Result]]:
        """The results already in, each with its checkpoint."""
        while True:
            try:
                answer = self.results.get_nowait()
            except queue.Empty:
                return
            if answer is not None:
                yield self._checkpoints[answer[0]], answer[1]

    def stop(self) -> None:
        """Make the thread return (it may be waiting on workers that will not answer: interrupted)."""
        with contextlib.suppress(OSError):
            os.write(self._stop_write, b"x")
        os.close(self._stop_write)
