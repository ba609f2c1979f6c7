"""One pool of threads per process for digests computed beside reads and writes.

Starting threads for every save costs more than the digest of a small file, and on a busy machine
each start waits for the scheduler to run the new thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["digest_pool"]

_WORKERS = max(2, min(4, os.cpu_count() or 1))

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_owner = 0


def digest_pool() -> ThreadPoolExecutor:
    """The process's digest threads. Work submitted to it must not wait on other work in it."""
    global _pool, _owner
    with _lock:
        # A forked child inherits the pool object but none of its threads: it gets a pool of its own.
        if _pool is None or _owner != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="ckptspec-digest")
            _owner = os.getpid()
        return _pool
