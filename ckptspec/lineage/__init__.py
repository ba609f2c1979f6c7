"""The run ledger: whether a run's checkpoints are one unbroken run.

Each manifest records its checkpoint's run and parent (`lineage`); the graph of a run's
checkpoints, with the counters each one holds (global step, optimizer and scheduler steps, data
position, gradient scaler, random generator states), shows a resume that did not continue the run:
a broken or forked chain, a rollback, a restarted scheduler or optimizer, re-seeded generators.

    from ckptspec.lineage import judge_run

    report = judge_run(["runs/"])
    raise SystemExit(report.exit_code)

Reading never runs pickle and never imports torch or TensorFlow.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_lineage", "judge_run"]


def __getattr__(name: str) -> Any:
    # The adapters import the state digest from this package at save time: the judging stays unloaded.
    if name in __all__:
        from . import _judge

        return getattr(_judge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
