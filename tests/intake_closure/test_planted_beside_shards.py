"""A directory that is one checkpoint of several files (a DCP save here; Trainer checkpoints in
tests/hf) holds what its writer put there; a file planted beside the shards, or in a directory
inside it, is judged on its own by `audit`, never passed over as part of the save."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from ckptspec._validate import audit  # noqa: E402

from .._payloads import judged_dangerous, plant  # noqa: E402


@pytest.fixture()
def save(tmp_path: Path) -> Path:
    directory = tmp_path / "run" / "step-4"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
        dcp.save({"weight": torch.arange(8.0)}, checkpoint_id=directory)
    return directory


def test_a_pickle_planted_in_a_dcp_save_is_judged_on_its_own(save: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted = [save / "extra.pkl", save / "hooks" / "hook.pkl"]
    plant(planted, marker)
    report = audit([tmp_path / "run"], jobs=1)
    assert {Path(result.checkpoint): result.format for result in report.results}[save] == "dcp"
    assert all(judged_dangerous(report, path) for path in planted)
    assert not report.passed and not marker.exists()


def test_a_special_file_in_a_dcp_save_is_named(save: Path, tmp_path: Path) -> None:
    os.mkfifo(save / "notes.pkl")
    report = audit([tmp_path / "run"], jobs=1)
    by_file = {Path(result.checkpoint): result for result in report.results}
    assert any(finding.code == "CKS001" and "FIFO" in finding.message for finding in by_file[save / "notes.pkl"].findings)
    assert by_file[save].format == "dcp"


def test_a_clean_dcp_save_is_one_checkpoint(save: Path, tmp_path: Path) -> None:
    report = audit([tmp_path / "run"], jobs=1)
    assert [Path(result.checkpoint) for result in report.results] == [save]
