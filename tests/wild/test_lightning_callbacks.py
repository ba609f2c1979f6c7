"""A Lightning checkpoint written with the callbacks users add is adopted and then validates clean."""

from __future__ import annotations

import shutil
from pathlib import Path

from ckptspec import validate
from ckptspec.adopt import adopt


def test_stochastic_weight_averaging_scheduler_is_no_false_alarm(lightning_with_callbacks: Path, tmp_path: Path) -> None:
    """StochasticWeightAveraging swaps an SWALR in for the configured scheduler mid-run; its own step
    count is not the fit loop's count of scheduler steps (CKS312 compared the two)."""
    path = tmp_path / "last.ckpt"
    shutil.copyfile(lightning_with_callbacks, path)
    adopt(path)
    assert [(f.code, f.severity) for f in validate(path).findings] == [("CKS004", "warning")]
