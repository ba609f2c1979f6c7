"""An atomic write replaces exactly the file it was asked to and removes only its own leftovers:
whatever else lies beside it, named like a leftover or linked to the target, keeps its bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckptspec import _atomic
from ckptspec._atomic import atomic_write_bytes
from ckptspec._exceptions import WriteError

LEFTOVER = ".out.yaml.0123456789ab.tmp"
"""The name an interrupted write to `out.yaml` leaves."""


def test_a_link_named_like_a_leftover_is_kept_and_its_target_untouched(tmp_path: Path) -> None:
    precious = tmp_path / "elsewhere" / "precious.bin"
    precious.parent.mkdir()
    precious.write_bytes(b"user data")
    (tmp_path / LEFTOVER).symlink_to(precious)

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / LEFTOVER).is_symlink() and precious.read_bytes() == b"user data"


def test_a_directory_named_like_a_leftover_is_kept(tmp_path: Path) -> None:
    (tmp_path / LEFTOVER).mkdir()
    (tmp_path / LEFTOVER / "inside").write_bytes(b"user data")

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / LEFTOVER / "inside").read_bytes() == b"user data"


def test_a_fifo_named_like_a_leftover_is_kept_and_never_blocks(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / LEFTOVER)

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / LEFTOVER).exists() and (tmp_path / "out.yaml").read_bytes() == b"new"


def test_a_leftover_hard_linked_to_a_user_file_loses_only_its_own_name(tmp_path: Path) -> None:
    precious = tmp_path / "precious.bin"
    precious.write_bytes(b"user data")
    os.link(precious, tmp_path / LEFTOVER)

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert not (tmp_path / LEFTOVER).exists() and precious.read_bytes() == b"user data"


@pytest.mark.parametrize("name", [".out.yaml.0123456789ab.tmp.bak", ".out.yaml.0123456789AB.tmp", ".out.yaml.012345.tmp", ".other.yaml.0123456789ab.tmp"])
def test_files_only_resembling_a_leftover_are_kept(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"user data")

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / name).read_bytes() == b"user data"


def test_a_link_at_the_target_is_replaced_and_what_it_pointed_to_is_untouched(tmp_path: Path) -> None:
    precious = tmp_path / "precious.yaml"
    precious.write_bytes(b"user data")
    (tmp_path / "out.yaml").symlink_to(precious)

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert not (tmp_path / "out.yaml").is_symlink() and (tmp_path / "out.yaml").read_bytes() == b"new"
    assert precious.read_bytes() == b"user data"


def test_a_hard_linked_target_keeps_its_other_name_s_bytes(tmp_path: Path) -> None:
    (tmp_path / "out.yaml").write_bytes(b"old")
    os.link(tmp_path / "out.yaml", tmp_path / "other-name.yaml")

    atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / "out.yaml").read_bytes() == b"new" and (tmp_path / "other-name.yaml").read_bytes() == b"old"


def test_a_directory_at_the_target_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "out.yaml").mkdir()
    (tmp_path / "out.yaml" / "inside").write_bytes(b"user data")

    with pytest.raises(WriteError):
        atomic_write_bytes(tmp_path / "out.yaml", b"new")

    assert (tmp_path / "out.yaml" / "inside").read_bytes() == b"user data"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_a_write_error_and_its_files_are_kept(tmp_path: Path) -> None:
    (tmp_path / "out.yaml").write_bytes(b"old")
    (tmp_path / LEFTOVER).write_bytes(b"an old leftover")
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(WriteError, match="out.yaml"):
            atomic_write_bytes(tmp_path / "out.yaml", b"new")
        assert (tmp_path / "out.yaml").read_bytes() == b"old" and (tmp_path / LEFTOVER).exists()
    finally:
        tmp_path.chmod(0o755)


@pytest.mark.parametrize("intruder", ["directory", "symlink"])
def test_something_put_at_the_target_after_the_check_is_given_back_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, intruder: str) -> None:
    """The target was a file when checked, and is swapped for a directory or a link before the
    swap (simulated by the check answering for the file that was there)."""
    target = tmp_path / "out.yaml"
    precious = tmp_path / "precious.bin"
    precious.write_bytes(b"user data")
    if intruder == "directory":
        target.mkdir()
        (target / "inside").write_bytes(b"user data")
    else:
        target.symlink_to(precious)
    checked = _atomic._is_regular_file
    monkeypatch.setattr(_atomic, "_is_regular_file", lambda path: path == target or checked(path))

    with pytest.raises(WriteError, match="previous file kept"):
        atomic_write_bytes(target, b"new")

    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml", "precious.bin"]
    assert (target / "inside").read_bytes() == b"user data" if intruder == "directory" else os.readlink(target) == str(precious)
    assert precious.read_bytes() == b"user data"
