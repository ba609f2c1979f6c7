"""Hostile NumPy `.npz` archives at audit: damaged members, a member that inflates to a gigabyte, an
object array hidden behind thousands of plain ones, and a torch archive dressed as one."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import numpy

from ckptspec import audit

from .._payloads import SystemCall


def _codes(path: Path) -> list[str]:
    (result,) = audit([path]).results
    return [finding.code for finding in result.findings]


def _npy(array: numpy.ndarray) -> bytes:
    buffer = io.BytesIO()
    numpy.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def test_a_damaged_compressed_member_is_an_unreadable_archive(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    numpy.savez_compressed(buffer, table=numpy.zeros(100_000))
    damaged = bytearray(buffer.getvalue())
    damaged[60:200] = bytes(byte ^ 0xFF for byte in damaged[60:200])
    (tmp_path / "filters.npz").write_bytes(bytes(damaged))
    assert _codes(tmp_path / "filters.npz") == ["CKS405"]  # cannot be inspected, named


def test_a_member_that_inflates_to_a_gigabyte_is_read_a_few_kib_deep(tmp_path: Path) -> None:
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("huge.npy", "w", force_zip64=True) as member:
        member.write(_npy(numpy.zeros(4)))
        zeros = bytes(64 << 20)
        for _ in range(16):  # 1 GiB of zeros, about 1 MiB deflated
            member.write(zeros)
    assert path.stat().st_size < 8 << 20
    started = time.process_time()
    assert _codes(path) == ["CKS015"]
    assert time.process_time() - started < 10


def test_an_object_array_behind_thousands_of_plain_ones_is_found(tmp_path: Path) -> None:
    path = tmp_path / "many.npz"
    plain = _npy(numpy.zeros(1))
    with zipfile.ZipFile(path, "w") as archive:
        for index in range(5_000):
            archive.writestr(f"arr_{index}.npy", plain)
        archive.writestr("last.npy", _npy(numpy.array([SystemCall("true")], dtype=object)))
    assert _codes(path) == ["CKS401"]


def test_a_torch_archive_whose_first_record_is_named_npy_is_judged_as_torch_would_read_it(tmp_path: Path) -> None:
    path = tmp_path / "model.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/weights.npy", _npy(numpy.zeros(1)))
        archive.writestr("archive/data.pkl", b"\x80\x02cos\nsystem\nq\x00.")
    assert "CKS401" in _codes(path)
