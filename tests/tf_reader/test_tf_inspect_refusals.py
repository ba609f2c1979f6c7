"""`inspect` on damaged or unreadable bundles: an error naming the file at fault, never a summary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from .tf_written import WrittenBundle

from ckptspec._exceptions import CorruptCheckpointError, ReaderError
from ckptspec.cli import cli
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.tfbundle import OBJECT_GRAPH_KEY, open_bundle

from ..torch_reader._unprivileged import run_ckptspec_unprivileged

pytestmark = pytest.mark.tensorflow


@pytest.fixture
def saved(tf_bundles: dict[str, WrittenBundle], tmp_path: Path) -> Path:
    return tf_bundles["checkpoint_save"].copy_to(tmp_path / "copy")


def _inspect_cli(prefix: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["inspect", "--format", "json", str(prefix)])
    return result.exit_code, result.stdout, result.stderr


def test_a_truncated_shard_is_refused_naming_the_shard(saved: Path) -> None:
    shard = open_bundle(saved).shard_path(0)
    os.truncate(shard, 8)
    assert open_bundle(saved).object_graph_error is not None
    with pytest.raises(CorruptCheckpointError, match=rf"^{shard}: {OBJECT_GRAPH_KEY}: bytes \d+\.\.\d+ lie outside"):
        inspect_checkpoint(saved)
    code, stdout, stderr = _inspect_cli(saved)
    assert (code, stdout) == (2, "")
    assert stderr.startswith(f"error: {shard}: {OBJECT_GRAPH_KEY}: bytes ") and stderr.count("\n") == 1
    assert "more problem" in stderr and "`ckptspec validate` lists them all" in stderr


def test_a_missing_shard_is_refused(saved: Path) -> None:
    shard = open_bundle(saved).shard_path(0)
    shard.unlink()
    code, stdout, stderr = _inspect_cli(saved)
    assert (code, stdout) == (2, "")
    assert stderr.startswith(f"error: {shard}: ") and "data shard 0 of 1 is missing" in stderr


def test_a_sound_bundle_is_still_summarised(saved: Path) -> None:
    code, stdout, stderr = _inspect_cli(saved)
    assert (code, stderr) == (0, "")
    assert '"object_graph": true' in stdout


def test_an_unreadable_shard_is_a_reader_error_naming_it(saved: Path) -> None:
    shard = open_bundle(saved).shard_path(0)
    shard.chmod(0)
    result = run_ckptspec_unprivileged("inspect", str(saved))
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"error: {shard}: cannot read: Permission denied\n")


def test_an_unreadable_index_is_a_reader_error_naming_it(saved: Path) -> None:
    Path(f"{saved}.index").chmod(0)
    result = run_ckptspec_unprivileged("inspect", str(saved))
    assert (result.returncode, result.stderr) == (2, f"error: {saved}.index: cannot read: Permission denied\n")


def test_an_index_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "ckpt-1.index").mkdir()
    with pytest.raises(ReaderError) as caught:
        detect(tmp_path / "ckpt-1")
    assert str(caught.value) == (
        f"{tmp_path / 'ckpt-1.index'}: is a directory, not the index file of TensorFlow checkpoint {tmp_path / 'ckpt-1'}"
    )
