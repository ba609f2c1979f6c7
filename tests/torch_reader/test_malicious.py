"""Malicious pickles, bare and inside a torch zip: each is reported dangerous and its payload never runs.

Every payload would create a marker file. The live test proves the payloads work by running them with
the plain `pickle` module in a child process; the reader tests then prove ckptspec never runs them.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats._names import DetectedCheckpoint
from ckptspec.formats.torchzip import open_torch_checkpoint, unpickle_untrusted

from .._payloads import SystemCall

EXTENSIONS = {0xF1: ("os", "system"), 0x1234: ("builtins", "eval"), 0x00123456: ("posix", "system")}


def _unicode(text: str) -> bytes:
    encoded = text.encode()
    return b"X" + struct.pack("<I", len(encoded)) + encoded


def _short(text: str) -> bytes:
    encoded = text.encode()
    return b"\x8c" + bytes([len(encoded)]) + encoded


@dataclass(frozen=True)
class Payload:
    name: str
    build: Callable[[str, str], bytes]
    """(shell command, python code) → pickle bytes."""
    dangerous: str
    live: bool
    """Plain `pickle.loads` runs it (NEWOBJ only calls `__new__`, so those are not live)."""


PAYLOADS = [
    Payload("global-reduce-os-system", lambda cmd, code: b"\x80\x02cos\nsystem\n" + _unicode(cmd) + b"\x85R.",
            "os.system", True),
    Payload("global-reduce-eval", lambda cmd, code: b"\x80\x02cbuiltins\neval\n" + _unicode(code) + b"\x85R.",
            "builtins.eval", True),
    Payload("protocol0-py2-builtin-eval", lambda cmd, code: f"c__builtin__\neval\n(V{code}\ntR.".encode(),
            "builtins.eval", True),
    Payload("stack-global-popen", lambda cmd, code: b"\x80\x04" + _short("subprocess") + _short("Popen")
            + b"\x93](" + b"".join(_short(p) for p in cmd.split(" ", 1)) + b"e\x85R.", "subprocess.Popen", True),
    Payload("inst-os-system", lambda cmd, code: f"(V{cmd}\nios\nsystem\n.".encode(), "os.system", True),
    Payload("obj-os-system", lambda cmd, code: b"(cos\nsystem\n" + _unicode(cmd) + b"o.", "os.system", True),
    Payload("newobj-popen", lambda cmd, code: b"\x80\x02csubprocess\nPopen\n](" + _unicode("touch")
            + _unicode(cmd.split(" ", 1)[1]) + b"e\x85\x81.", "subprocess.Popen", False),
    Payload("newobj-ex-popen", lambda cmd, code: b"\x80\x04" + _short("subprocess") + _short("Popen")
            + b"\x93](" + _short("touch") + _short(cmd.split(" ", 1)[1]) + b"e\x85}\x92.", "subprocess.Popen", False),
    Payload("build-setstate-hijack", lambda cmd, code: b"\x80\x02cargparse\nNamespace\n)\x81}(" + _unicode("__setstate__")
            + b"cos\nsystem\nub" + _unicode(cmd) + b"b.", "os.system", True),
    Payload("ext1-registered", lambda cmd, code: b"\x80\x02\x82\xf1" + _unicode(cmd) + b"\x85R.", "os.system", True),
    Payload("ext2-registered", lambda cmd, code: b"\x80\x02\x83\x34\x12" + _unicode(code) + b"\x85R.",
            "builtins.eval", True),
    Payload("ext4-registered", lambda cmd, code: b"\x80\x02\x84" + struct.pack("<i", 0x00123456) + _unicode(cmd)
            + b"\x85R.", "posix.system", True),
    Payload("ext1-unregistered", lambda cmd, code: b"\x80\x02\x82\xf9" + _unicode(cmd) + b"\x85R.",
            "copyreg.extension.249", False),
    Payload("memo-reused-callable", lambda cmd, code: b"\x80\x02cos\nsystem\nq\x000h\x00" + _unicode(cmd)
            + b"\x85Rh\x00" + _unicode(cmd) + b"\x85R\x86.", "os.system", True),
]  # fmt: skip


@pytest.fixture
def registered_extensions() -> Iterator[None]:
    """Register the extension codes, and fill CPython's EXT cache with the real callables, as an
    earlier plain unpickling in the same process would have."""
    registered = []
    try:
        for code, (module, name) in EXTENSIONS.items():
            copyreg.add_extension(module, name, code)
            registered.append((module, name, code))
            pickle.loads(b"\x80\x02\x84" + struct.pack("<i", code) + b".")
        yield
    finally:
        for module, name, code in registered:
            copyreg.remove_extension(module, name, code)


def _commands(marker: Path) -> tuple[str, str]:
    return f"touch {marker}", f"open({str(marker)!r}, 'w').close()"


def _torch_archive_with(data_pkl: bytes, target: Path, template_dir: Path) -> Path:
    torch = pytest.importorskip("torch")
    from ._torch_corpus import rewrite_archive

    template = template_dir / "template.pt"
    torch.save({"w": torch.ones(2)}, template)
    return rewrite_archive(template, target, replace={"data.pkl": data_pkl})


@pytest.mark.parametrize("payload", [p for p in PAYLOADS if p.live], ids=lambda p: p.name)
def test_payload_is_live_under_plain_pickle(payload: Payload, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = textwrap.dedent(f"""
        import copyreg, pickle, time, pathlib
        for code, (module, name) in {EXTENSIONS!r}.items():
            copyreg.add_extension(module, name, code)
        try:
            pickle.loads({payload.build(*_commands(marker))!r})
        except Exception:
            pass
        while not pathlib.Path({str(marker)!r}).exists():  # a payload may start a process that writes it later
            time.sleep(0.02)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    assert marker.exists()


@pytest.mark.usefixtures("registered_extensions")
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_bare_pickle_is_reported_and_not_run(payload: Payload, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    _, found = unpickle_untrusted(payload.build(*_commands(marker)), "evil.pkl")
    assert {g.qualname: g.safety for g in found}[payload.dangerous] == "dangerous"
    assert not marker.exists()


@pytest.mark.usefixtures("registered_extensions")
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_bare_pickle_file_is_detected_and_inspected_not_run(payload: Payload, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "evil.pkl").write_bytes(payload.build(*_commands(marker)))
    assert detect(tmp_path / "evil.pkl") == DetectedCheckpoint("pickle", tmp_path / "evil.pkl")
    inspection = inspect_checkpoint(tmp_path / "evil.pkl")
    assert (inspection.format, inspection.tensors) == ("pickle", [])
    assert {g.qualname: g.safety for g in inspection.globals}[payload.dangerous] == "dangerous"
    assert not marker.exists()


@pytest.mark.usefixtures("registered_extensions")
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_payload_inside_a_torch_zip_is_reported_and_not_run(payload: Payload, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _torch_archive_with(payload.build(*_commands(marker)), tmp_path / "evil.pt", tmp_path)
    with open_torch_checkpoint(path) as checkpoint:
        assert {g.qualname: g.safety for g in checkpoint.globals}[payload.dangerous] == "dangerous"
    assert not marker.exists()


@pytest.mark.usefixtures("registered_extensions")
def test_ext_reading_leaves_the_process_extension_cache_alone(tmp_path: Path) -> None:
    cached_before = dict(copyreg._extension_cache)  # type: ignore[attr-defined]
    unpickle_untrusted(PAYLOADS[9].build(*_commands(tmp_path / "ran")), "evil.pkl")
    assert copyreg._extension_cache == cached_before  # type: ignore[attr-defined]
    assert copyreg._extension_cache[0xF1] is os.system  # type: ignore[attr-defined]


def test_checkpoint_written_by_torch_save_with_a_reduce_payload(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    marker = tmp_path / "ran"
    torch.save({"w": torch.ones(2), "evil": SystemCall(f"touch {marker}")}, tmp_path / "evil.pt")
    with open_torch_checkpoint(tmp_path / "evil.pt") as checkpoint:
        safety = {g.qualname: g.safety for g in checkpoint.globals}
        assert safety[f"{os.system.__module__}.system"] == "dangerous"
        assert safety["torch._utils._rebuild_tensor_v2"] == "allowed"
        assert checkpoint.tree["evil"].args == (f"touch {marker}",)
        assert checkpoint.tree["w"].read_bytes() == torch.ones(2).numpy().tobytes()
    assert not marker.exists()


def test_unreadable_malicious_pickle_still_names_its_dangerous_globals() -> None:
    from ckptspec import CorruptCheckpointError

    build_on_a_class = b"\x80\x02cos\nsystem\n}b."
    with pytest.raises(CorruptCheckpointError, match=r"^evil\.pkl cannot be read: .*dangerous globals: os\.system$"):
        unpickle_untrusted(build_on_a_class, "evil.pkl")


def test_a_pickle_that_builds_into_a_torch_value_changes_no_other_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    # BUILD on torch.FloatStorage sets its element type for the rest of this pickle; the builders
    # of the next checkpoint must not see it.
    retyped = b"\x80\x02ctorch\nFloatStorage\n" + _unicode("float64") + b"\x85b."
    hostile = _torch_archive_with(retyped, tmp_path / "retyped.pt", tmp_path)
    with open_torch_checkpoint(hostile) as checkpoint:
        assert checkpoint.tree.dtype == "float64"
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pt")
    with open_torch_checkpoint(tmp_path / "plain.pt") as checkpoint:
        assert checkpoint.tree["w"].dtype == "float32"


def test_a_frame_longer_than_its_pickle_is_read_as_truncated_without_allocating_its_length() -> None:
    from ckptspec import CorruptCheckpointError

    claims_an_exabyte = b"\x80\x04\x95" + struct.pack("<Q", 1 << 60) + b"N."
    with pytest.raises(CorruptCheckpointError, match=r"^huge\.pkl cannot be read: UnpicklingError: pickle data was truncated$"):
        unpickle_untrusted(claims_an_exabyte, "huge.pkl")
