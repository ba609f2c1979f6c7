"""The process's threads for work beside reads and writes: digests, and the records of a save.

Starting threads for every save costs more than the digest of a small file, and on a busy machine
each start waits for the scheduler to run the new thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["digest_pool", "records_pool"]

_DIGEST_WORKERS = max(2, min(4, os.cpu_count() or 1))

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}
_owner = 0


def digest_pool() -> ThreadPoolExecutor:
    """The process's digest threads. Work submitted to it must not wait on other work in it."""
    return _pool("ckptspec-digest", _DIGEST_WORKERS)


def records_pool() -> ThreadPoolExecutor:
    """One thread for what a save builds while its file is written; its work may wait on the digest
    threads (they never wait on it), so it is not one of them."""
    return _pool("ckptspec-records", 1)


def _pool(name: str, workers: int) -> ThreadPoolExecutor:
    global _owner
    with _lock:
        # A forked child inherits the pool objects but none of their threads: it gets pools of its own.
        if _owner != os.getpid():
            _pools.clear()
            _owner = os.getpid()
        if name not in _pools:
            _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return _pools[name]
