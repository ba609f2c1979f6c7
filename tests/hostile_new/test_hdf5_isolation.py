"""The HDF5 library parses untrusted bytes in a forked child: a file that crashes it is an error naming
the file, and whatever the child finds (a value, a refusal) reaches the caller as if read in place."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("h5py")


def _in_a_fresh_process(body: str) -> subprocess.CompletedProcess[str]:
    """`body` run by an interpreter of its own: a crash on purpose stays out of the test process."""
    script = "from ckptspec.formats._hdf5 import isolated\nfrom ckptspec import CkptspecError\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_a_library_crash_is_an_error_naming_the_file() -> None:
    outcome = _in_a_fresh_process(
        """
        import os, signal, threading
        threading.Thread(target=threading.Event().wait, daemon=True).start()  # as a progress bar's
        try:
            isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV), "upload.h5", answer_bytes=1 << 20)
        except CkptspecError as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == (
        "CorruptCheckpointError upload.h5: malformed HDF5 structure: the HDF5 library crashed reading it (signal SIGSEGV)"
    )


def test_the_childs_value_and_refusals_reach_the_caller() -> None:
    outcome = _in_a_fresh_process(
        """
        import os
        from ckptspec._exceptions import UnsupportedFormatError
        print(isolated(lambda: [{"pid": os.getpid()}, "\\udcfd"], "upload.h5", answer_bytes=1 << 20)[0]["pid"] != os.getpid())
        def refuse():
            raise UnsupportedFormatError("upload.h5: a virtual dataset; refused")
        try:
            isolated(refuse, "upload.h5", answer_bytes=1 << 20)
        except UnsupportedFormatError as exc:
            print(exc)
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.splitlines() == ["True", "upload.h5: a virtual dataset; refused"]


def test_a_library_that_never_finishes_is_stopped_and_the_file_named() -> None:
    outcome = _in_a_fresh_process(
        """
        import time
        try:
            isolated(lambda: time.sleep(600), "upload.h5", answer_bytes=1 << 20, seconds=1)
        except CkptspecError as exc:
            print(exc)
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.splitlines() == [
        "upload.h5: malformed HDF5 structure: the HDF5 library had not finished reading it after 1 s",
    ]


def test_a_file_that_crashed_the_library_is_refused_by_every_command(tmp_path: Path) -> None:
    upload = tmp_path / "model.h5"
    shutil.copyfile(Path(__file__).parents[1] / "fixtures" / "keras-h5-crashes-hdf5.h5", upload)

    for command in (["inspect"], ["validate"], ["manifest"], ["audit", "--jobs", "1"]):
        target = tmp_path if command[0] == "audit" else upload
        outcome = subprocess.run([sys.executable, "-m", "ckptspec", *command, str(target)], capture_output=True, text=True, timeout=300)
        assert outcome.returncode in (1, 2), (command, outcome.returncode, outcome.stderr)
        said = outcome.stdout + outcome.stderr
        assert f"{upload}: malformed HDF5 structure" in said and "internal error" not in said, (command, said)


def test_the_answer_is_awaited_on_a_descriptor_past_1023() -> None:
    outcome = _in_a_fresh_process(
        """
        import os, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # an audit holding many files
        print(isolated(lambda: "read", "upload.h5", answer_bytes=1 << 20))
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == "read"


def test_a_process_out_of_descriptors_says_so_naming_the_file() -> None:
    outcome = _in_a_fresh_process(
        """
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            isolated(lambda: "read", "upload.h5", answer_bytes=1 << 20)
        except CkptspecError as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == (
        "ReaderError upload.h5: cannot read: no process could be started to parse its HDF5 structure (Too many open files)"
    )


def test_a_child_answering_more_than_the_file_could_describe_or_out_of_form_is_refused() -> None:
    outcome = _in_a_fresh_process(
        """
        import json, os
        from ckptspec.formats import _hdf5
        try:
            isolated(lambda: "x" * 100_000, "upload.h5", answer_bytes=10_000)
        except CkptspecError as exc:
            print(exc)
        def forged(read, sending):  # what a child whose memory a file corrupted might write
            os.write(sending, json.dumps({"error": "SystemExit", "message": 1}).encode())
            os._exit(0)
        _hdf5._answer = forged
        try:
            isolated(lambda: "read", "upload.h5", answer_bytes=10_000)
        except CkptspecError as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.splitlines() == [
        "upload.h5: malformed HDF5 structure: the HDF5 library's account of it ran past 10000 bytes, more than the file could describe",
        "CorruptCheckpointError upload.h5: malformed HDF5 structure: the HDF5 library crashed reading it (exit status 0)",
    ]
