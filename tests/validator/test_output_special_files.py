"""`-o/--output` onto a FIFO, a device or a link to one writes into it and leaves it what it was."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

from .conftest import run_cli


def test_validate_into_dev_null_keeps_the_device(torch_checkpoint: Path) -> None:
    code, _, err = run_cli("validate", torch_checkpoint, "--format", "json", "-o", os.devnull)
    assert (code, err) == (0, f"wrote {os.devnull}\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_link_to_dev_null_stays_a_link(torch_checkpoint: Path, tmp_path: Path) -> None:
    link = tmp_path / "report.json"
    link.symlink_to(os.devnull)
    code, _, _ = run_cli("validate", torch_checkpoint, "--format", "json", "-o", link)
    assert code == 0
    assert link.is_symlink() and os.readlink(link) == os.devnull


def test_validate_into_a_fifo_writes_the_report_through_it(torch_checkpoint: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    code, _, _ = run_cli("validate", torch_checkpoint, "--format", "json", "-o", fifo)
    reader.join(timeout=30)
    assert code == 0
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert len(received) == 1 and json.loads(received[0])["passed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo"]


def test_init_into_dev_null_with_force_keeps_the_device() -> None:
    code, _, _ = run_cli("init", "--force", "-o", os.devnull)
    assert code == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_regular_report_is_still_replaced_atomically(torch_checkpoint: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("previous run")
    code, _, _ = run_cli("validate", torch_checkpoint, "--format", "json", "-o", report)
    assert code == 0 and report.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
