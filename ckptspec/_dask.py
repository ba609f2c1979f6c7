"""Audit fanned out over Dask: the same validation as the local process pool, batched so that the
per-task overhead of a cluster (serialisation, scheduling) does not dominate small checkpoints.

`address` is a scheduler (`tcp://host:8786`); without one a `LocalCluster` of `jobs` single-threaded
worker processes is started for the audit and stopped after it. Needs the `dask` extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._result import Executor, Judge, Result

__all__ = ["dask_executor", "validate_on_dask"]

_BATCHES_PER_WORKER = 4
"""Enough batches per worker to balance uneven checkpoints, few enough that a task's milliseconds of
overhead stay small beside the work in it."""
_MAX_BATCH = 256


def dask_executor(executor: str) -> Executor:
    """The `audit` executor `--executor` names: `dask` a LocalCluster of `jobs` workers,
    `dask://host:port` the cluster of the scheduler at `tcp://host:port`."""
    address = None if executor == "dask" else "tcp://" + executor[len("dask://") :]

    def on_dask(checkpoints: list[Path], judge: Judge, jobs: int) -> Iterator[tuple[Path, Result]]:
        return validate_on_dask(checkpoints, judge, address=address, jobs=jobs)

    return on_dask


def validate_on_dask(checkpoints: list[Path], judge: Judge, *, address: str | None, jobs: int) -> Iterator[tuple[Path, Result]]:
    """Each checkpoint's result under `judge`, in the order batches finish."""
    from distributed import Client, LocalCluster, as_completed

    cluster = None if address else LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        with Client(address or cluster) as client:
            futures = [client.submit(_validate_batch, batch, judge, pure=False) for batch in _batches(checkpoints, client)]
            for future in as_completed(futures):
                yield from future.result()
    finally:
        if cluster is not None:
            cluster.close()


def _batches(checkpoints: list[Path], client: object) -> Iterator[list[Path]]:
    workers = max(1, len(client.scheduler_info().get("workers", {})))  # type: ignore[attr-defined]
    per_batch = max(1, min(_MAX_BATCH, -(-len(checkpoints) // (workers * _BATCHES_PER_WORKER))))
    for start in range(0, len(checkpoints), per_batch):
        yield checkpoints[start : start + per_batch]


def _validate_batch(batch: list[Path], judge: Judge) -> list[tuple[Path, Result]]:
    return [(path, judge(path)) for path in batch]
