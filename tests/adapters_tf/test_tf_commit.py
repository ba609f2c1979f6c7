"""The manager's bundles as the state file `checkpoint` keeps them: what it no longer lists is
discarded, not damaged; the sweep past `max_to_keep` and a save under a kept number leave every
manifest describing files that are there. (Kills at every step: tests/crash.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptspec import RestoreError, audit
from ckptspec.formats.tf_state import read_checkpoint_state

from .tf_training import make_run


def _leftovers(directory: Path) -> set[str]:
    return {Path(finding.file or "").name for finding in audit([directory]).findings if finding.code == "CKS022"}


def test_a_bundle_the_state_file_no_longer_lists_is_discarded_not_damaged_and_the_next_save_removes_it(tmp_path: Path) -> None:
    run = make_run(tmp_path, max_to_keep=2)
    run.train(1)
    run.manager.save()
    # What a save killed before it named its bundle leaves: the bundle, written by TensorFlow, and no manifest.
    unlisted = Path(run.manager.checkpoint.write(str(tmp_path / "ckpt-9")))
    assert read_checkpoint_state(tmp_path).all_model_checkpoint_paths == (tmp_path / "ckpt-1",)

    report = audit([tmp_path])
    assert report.passed, [(finding.code, finding.message) for finding in report.findings if finding.severity == "error"]
    assert _leftovers(tmp_path) == {"ckpt-9.index", "ckpt-9.data-00000-of-00001"}
    with pytest.raises(RestoreError) as refused:
        run.manager.restore(unlisted)
    assert str(refused.value) == (
        f"{unlisted}: cannot check the restore: there is no manifest ckpt-9.ckptspec.yaml beside it, and the state file no "
        "longer lists it: a save or a removal of it was interrupted before it was named or after it was let go "
        f"(the latest bundle is {tmp_path / 'ckpt-1'})"
    )

    run.train(1)
    assert run.manager.save() == tmp_path / "ckpt-2"
    assert not _leftovers(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint",
        *(f"ckpt-{number}{suffix}" for number in (1, 2) for suffix in (".ckptspec.yaml", ".data-00000-of-00001", ".index")),
    ]


def test_the_sweep_and_a_save_under_a_kept_number_leave_only_manifests_of_files_that_are_there(tmp_path: Path) -> None:
    run = make_run(tmp_path, max_to_keep=2)
    for _ in range(3):
        run.train(1)
        run.manager.save()
    run.train(1)
    again = run.manager.save(checkpoint_number=3)

    assert run.manager.checkpoints == [tmp_path / "ckpt-2", again]
    assert run.manager.latest_checkpoint == again
    report = audit([tmp_path])
    assert report.passed and not _leftovers(tmp_path), [(finding.code, finding.message) for finding in report.findings]
    assert {Path(result.checkpoint).name for result in report.results} == {"ckpt-2", "ckpt-3"}
    assert run.manager.restore().data_position["global_step"] == 4
