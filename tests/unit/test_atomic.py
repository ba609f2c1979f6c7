from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ckptspec import WriteError
from ckptspec._atomic import atomic_file, atomic_write_bytes


def test_replaces_the_whole_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "m.yaml"
    target.write_text("old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "m.yaml"
    target.write_text("old contents")

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(WriteError, match=r"m.yaml: write failed, previous file kept: No space left on device"):
        atomic_write_bytes(target, b"new contents that never land")
    monkeypatch.undo()
    assert target.read_text() == "old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]


def test_an_exception_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    target.write_bytes(b"complete old checkpoint")
    with pytest.raises(KeyboardInterrupt), atomic_file(target, durable=False) as handle:
        handle.write(b"half of the new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"complete old checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_new_files_get_the_usual_mode_and_replaced_files_keep_theirs(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.yaml"
        atomic_write_bytes(fresh, b"x")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        kept = tmp_path / "kept.yaml"
        kept.write_bytes(b"old")
        kept.chmod(0o600)
        atomic_write_bytes(kept, b"new")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    finally:
        os.umask(previous)


def test_write_into_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match=r"m.yaml: cannot create a file in .*nope: No such file or directory"):
        atomic_write_bytes(tmp_path / "nope" / "m.yaml", b"x")
