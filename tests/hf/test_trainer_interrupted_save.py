"""A real `Trainer.train` killed (SIGKILL) inside a save: after the Trainer wrote `checkpoint-8/`
and removed the checkpoints past `save_total_limit`, before the callback wrote its manifest. The
output directory then holds one checkpoint and no manifest."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from ckptspec import audit  # noqa: E402
from ckptspec._sidecars import manifest_path_for
from ckptspec.transformers import CkptspecCallback, last_checkpoint  # noqa: E402

from ._tiny import trainer  # noqa: E402

_KILLED_IN_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from transformers import TrainerCallback
    from ckptspec.transformers import CkptspecCallback
    from tests.hf._tiny import trainer

    class KilledInSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 8:  # the Trainer has written checkpoint-8/ and rotated; the manifest comes next
                os.kill(os.getpid(), signal.SIGKILL)

    trainer(Path(sys.argv[1]), callbacks=[KilledInSave(), CkptspecCallback()], save_total_limit=1).train()
    """
)


@pytest.fixture
def killed_run(tmp_path: Path) -> Path:
    output = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", _KILLED_IN_SAVE, str(output)], cwd=Path(__file__).parents[2], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return output


def test_the_checkpoint_the_kill_left_without_a_manifest_is_reported_as_an_interrupted_save(killed_run: Path) -> None:
    assert sorted(path.name for path in killed_run.iterdir()) == ["checkpoint-8"]  # save_total_limit removed checkpoint-4 first
    assert not manifest_path_for(killed_run / "checkpoint-8").exists()
    report = audit([killed_run])
    assert report.passed, [(finding.code, finding.message) for result in report.results for finding in result.errors]
    interrupted = [finding.message for finding in report.findings if finding.code == "CKS023"]
    assert interrupted and "its manifest was never written: the save was interrupted after the Trainer wrote the checkpoint" in interrupted[0]


def test_the_next_train_writes_the_missing_manifest_and_resumes(killed_run: Path) -> None:
    assert last_checkpoint(killed_run) == killed_run / "checkpoint-8"
    resumed = trainer(killed_run, callbacks=[CkptspecCallback()], save_total_limit=1)
    resumed.train(resume_from_checkpoint=str(last_checkpoint(killed_run)))
    assert manifest_path_for(killed_run / "checkpoint-12").is_file()
    report = audit([killed_run])
    assert report.passed and not [finding for finding in report.findings if finding.code in ("CKS022", "CKS023")]


def test_the_last_checkpoint_is_the_newest_the_trainer_finished_writing(killed_run: Path) -> None:
    """A kill while the Trainer writes `checkpoint-N/` leaves it without `trainer_state.json`, its last file."""
    partial = killed_run / "checkpoint-12"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes((killed_run / "checkpoint-8" / "model.safetensors").read_bytes()[:100])
    assert last_checkpoint(killed_run) == killed_run / "checkpoint-8"
    assert last_checkpoint(killed_run / "nothing-here") is None
