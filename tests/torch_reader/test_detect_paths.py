"""What `detect` says about paths that are not checkpoint files: each its own problem, none hangs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ckptspec import ReaderError, UnsupportedFormatError
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint

from ._unprivileged import run_ckptspec_unprivileged

torch = pytest.importorskip("torch")


def _message(path: Path, error: type[Exception] = ReaderError) -> str:
    with pytest.raises(error) as caught:
        detect(path)
    return str(caught.value)


def test_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a.pt").symlink_to(tmp_path / "b.pt")
    (tmp_path / "b.pt").symlink_to(tmp_path / "a.pt")
    assert _message(tmp_path / "a.pt") == f"{tmp_path / 'a.pt'}: symlink loop: following its links never reaches a file"


def test_a_broken_symlink(tmp_path: Path) -> None:
    (tmp_path / "last.ckpt").symlink_to("epoch=3.ckpt")
    assert _message(tmp_path / "last.ckpt") == (
        f"{tmp_path / 'last.ckpt'}: broken symlink: it points to epoch=3.ckpt, which leads to no file"
    )


def test_a_symlink_to_a_checkpoint_is_followed(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "epoch=3.ckpt")
    (tmp_path / "last.ckpt").symlink_to("epoch=3.ckpt")
    assert detect(tmp_path / "last.ckpt").kind == "torch-zip"


def test_a_fifo_is_named_and_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "model.pt")
    # In a child with a deadline: opening a FIFO for reading blocks until a writer comes, which is never.
    script = "import sys; from ckptspec.formats.detect import detect; detect(sys.argv[1])"
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "model.pt")], capture_output=True, text=True, timeout=60
    )
    assert (
        f"UnsupportedFormatError: {tmp_path / 'model.pt'}: not a regular file but a FIFO (named pipe); "
        "ckptspec reads checkpoint files, directories and TensorFlow prefixes"
    ) in result.stderr


def test_a_character_device() -> None:
    assert _message(Path("/dev/zero"), UnsupportedFormatError) == (
        "/dev/zero: not a regular file but a character device; ckptspec reads checkpoint files, directories "
        "and TensorFlow prefixes"
    )


def test_a_missing_path_keeps_its_message(tmp_path: Path) -> None:
    assert _message(tmp_path / "nothing.pt") == (
        f"{tmp_path / 'nothing.pt'}: no such file, directory or TensorFlow checkpoint prefix"
    )


def test_a_zip_that_torch_did_not_write(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "notes.zip", "w") as archive:
        archive.writestr("hello.txt", "hello")
    inspection = inspect_checkpoint(tmp_path / "notes.zip")  # judged as a container: no member is a pickle
    assert (inspection.format, inspection.globals, inspection.metadata["pickles"]) == ("archive", [], [])


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "model.pt")
    (tmp_path / "model.pt").chmod(0)
    result = run_ckptspec_unprivileged("inspect", str(tmp_path / "model.pt"))
    assert (result.returncode, result.stderr) == (2, f"error: {tmp_path / 'model.pt'}: cannot read: Permission denied\n")


def test_a_file_in_an_unsearchable_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    torch.save({"w": torch.ones(2)}, tmp_path / "runs" / "model.pt")
    (tmp_path / "runs").chmod(0o600)
    try:
        result = run_ckptspec_unprivileged("inspect", str(tmp_path / "runs" / "model.pt"))
    finally:
        (tmp_path / "runs").chmod(0o700)
    assert (result.returncode, result.stderr) == (
        2, f"error: {tmp_path / 'runs' / 'model.pt'}: cannot read: Permission denied\n"
    )


def test_an_unreadable_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir(mode=0)
    try:
        result = run_ckptspec_unprivileged("inspect", str(tmp_path / "runs"))
    finally:
        (tmp_path / "runs").chmod(0o700)
    assert (result.returncode, result.stderr) == (2, f"error: {tmp_path / 'runs'}: cannot read: Permission denied\n")


@pytest.mark.parametrize("command", ["validate", "manifest", "audit"])
def test_every_command_names_a_file_in_an_unsearchable_directory(tmp_path: Path, command: str) -> None:
    (tmp_path / "runs").mkdir()
    torch.save({"w": torch.ones(2)}, tmp_path / "runs" / "model.pt")
    (tmp_path / "runs").chmod(0o600)
    try:
        result = run_ckptspec_unprivileged(command, str(tmp_path / "runs" / "model.pt"))
        searched = run_ckptspec_unprivileged("audit", str(tmp_path))
    finally:
        (tmp_path / "runs").chmod(0o700)
    named = f"{tmp_path / 'runs' / 'model.pt'}: cannot read: Permission denied"
    assert "internal error" not in result.stderr + searched.stderr
    assert named in result.stdout + result.stderr and result.returncode in (1, 2)
    assert named in searched.stdout and searched.returncode == 1
