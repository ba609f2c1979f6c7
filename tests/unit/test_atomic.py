from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ckptspec import WriteError
from ckptspec import _atomic
from ckptspec._atomic import atomic_file, atomic_write_bytes
from ckptspec.checks.files import leftovers_of
from ckptspec.formats._names import is_sharded_save_file


def test_replaces_the_whole_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "m.yaml"
    target.write_text("old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]


@pytest.mark.parametrize("failing", ["fsync", "swap", "replace"])
def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "m.yaml"
    target.write_text("old contents")

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    if failing == "fsync":
        monkeypatch.setattr(os, "fsync", fail)
    elif failing == "swap":
        monkeypatch.setattr(_atomic, "_swap", fail)
    else:  # a file system that cannot swap, then the rename fails
        monkeypatch.setattr(_atomic, "_swap", lambda *names: False)
        monkeypatch.setattr(os, "replace", fail)
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


def test_an_existing_file_is_swapped_out_not_renamed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename over an existing file makes ext4 flush the new file at once; the swap does not."""
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    renamed_over: list[object] = []
    monkeypatch.setattr(os, "replace", lambda *names: renamed_over.append(names))
    atomic_write_bytes(target, b"new", durable=False)
    if renamed_over:
        pytest.skip("this system or file system cannot swap two names in one step")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


_KILLED_WRITE = """
import os, signal, sys
from ckptspec import _atomic
target, where = sys.argv[1], sys.argv[2]
if where == "after-swap":
    os.unlink = lambda path: os.kill(os.getpid(), signal.SIGKILL)
with _atomic.atomic_file(target, durable=False) as handle:
    handle.write(b"new checkpoint")
    if where == "mid-write":
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(("killed", "at_path", "left_over"), [
    ("mid-write", b"old checkpoint", b"new checkpoint"),
    ("after-swap", b"new checkpoint", b"old checkpoint"),
])  # fmt: skip
def test_a_killed_write_leaves_a_complete_file_and_a_leftover_the_next_write_removes(
    tmp_path: Path, killed: str, at_path: bytes, left_over: bytes
) -> None:
    target = tmp_path / "model.pt"
    target.write_bytes(b"old checkpoint")
    environment = {**os.environ, "PYTHONPATH": str(Path(_atomic.__file__).parents[1])}
    process = subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(target), killed], env=environment, check=False)
    assert process.returncode == -9
    assert target.read_bytes() == at_path
    if killed == "after-swap" and _atomic._exchange() is None:
        pytest.skip("no swap on this system: the rename left nothing behind")
    leftovers = leftovers_of(target)
    assert [path.read_bytes() for path in leftovers] == [left_over]  # validate reports it (CKS213)
    atomic_write_bytes(target, b"next checkpoint", durable=False)
    assert target.read_bytes() == b"next checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_a_write_in_progress_is_not_taken_for_a_leftover(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    with atomic_file(target, durable=False) as first:
        first.write(b"first")
        atomic_write_bytes(target, b"second", durable=False)
        first.write(b" writer")
    assert target.read_bytes() == b"first writer"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_a_fifo_named_like_a_leftover_is_neither_opened_for_long_nor_removed(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    fifo = tmp_path / ".model.pt.0123456789ab.tmp"
    os.mkfifo(fifo)
    atomic_write_bytes(target, b"new", durable=False)
    assert target.read_bytes() == b"new" and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_only_a_replaced_file_already_on_disk_has_its_cached_pages_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dropped: list[int] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: dropped.append(advice), raising=False)
    target = tmp_path / "model.pt"
    with open(target, "wb") as handle:
        handle.write(os.urandom(1 << 20))
    atomic_write_bytes(target, b"new", durable=False)  # its pages were still dirty (or it was just written)
    assert dropped == []
    os.sync()
    os.utime(target, (1, 1))  # and long ago: on disk by every measure the kernel offers
    atomic_write_bytes(target, b"newer", durable=False)
    assert dropped == [os.POSIX_FADV_DONTNEED] and target.read_bytes() == b"newer"


def _tree(directory: Path, files: dict[str, bytes]) -> None:
    for name, payload in files.items():
        (directory / name).write_bytes(payload)


@pytest.mark.parametrize("previous", ["directory", "file", "none"])
def test_a_new_directory_takes_the_place_of_what_was_there_in_one_step(tmp_path: Path, previous: str) -> None:
    target = tmp_path / "last.ckpt"
    if previous == "directory":
        target.mkdir()
        _tree(target, {"__0_0.distcp": b"old", "stale.distcp": b"old"})
    elif previous == "file":
        target.write_bytes(b"old file")
    with _atomic.staged_tree(target, tree_files=is_sharded_save_file, durable=True) as staged:
        _tree(staged.temporary, {"__0_0.distcp": b"new", ".metadata": b"meta"})
        assert staged.temporary.parent == tmp_path and _atomic.temporary_owner(staged.temporary.name) == "last.ckpt"
        staged.finish()
        staged.swap()
    assert sorted(path.name for path in target.iterdir()) == [".metadata", "__0_0.distcp"]
    assert (target / "__0_0.distcp").read_bytes() == b"new"
    assert [path.name for path in tmp_path.iterdir()] == ["last.ckpt"]  # the previous one went with the staging name


def test_a_directory_not_swapped_in_leaves_the_previous_one_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    target.mkdir()
    _tree(target, {"__0_0.distcp": b"old"})
    with pytest.raises(RuntimeError), _atomic.staged_tree(target, tree_files=is_sharded_save_file) as staged:
        _tree(staged.temporary, {"__0_0.distcp": b"new"})
        raise RuntimeError("the strategy failed")
    assert [path.name for path in tmp_path.iterdir()] == ["last.ckpt"]
    assert (target / "__0_0.distcp").read_bytes() == b"old"


def test_a_killed_directory_save_is_removed_by_the_next_one_unless_it_holds_what_no_save_writes(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    sharded, nested, other = (tmp_path / f".last.ckpt.{token}.tmp" for token in ("0123456789ab", "ba9876543210", "aaaaaaaaaaaa"))
    sharded.mkdir()
    _tree(sharded, {"__0_0.distcp": b"partial", ".metadata.tmp": b"partial", "meta.pt": b"partial"})
    (nested / "inside").mkdir(parents=True)
    other.mkdir()
    _tree(other, {"__0_0.distcp": b"user data", "notes.txt": b"user data"})
    with _atomic.staged_tree(target, tree_files=is_sharded_save_file) as staged:
        staged.swap()
    assert not sharded.exists()
    assert (nested / "inside").is_dir(), "a directory holding directories is not one ckptspec staged"
    assert (other / "notes.txt").read_bytes() == b"user data", "nor one holding a file no staged save writes"
