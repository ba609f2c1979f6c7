"""The zip checksum comes from ISA-L where the `fast` extra is installed, from zlib elsewhere, and
is the same number either way."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from ckptspec._crc32 import crc32


def test_the_fast_extra_is_what_the_tests_run() -> None:
    assert crc32.__module__ == "isal.isal_zlib", "the test install includes the `fast` extra"


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 255, 4096, 65_537, 1 << 20])
@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF, 0xFFFFFFFF])
def test_the_value_is_zlibs(size: int, seed: int) -> None:
    data = os.urandom(size)
    assert crc32(data, seed) == zlib.crc32(data, seed)
    assert crc32(memoryview(data)[size // 3 :], seed) == zlib.crc32(data[size // 3 :], seed)


def test_a_mapped_file_is_checksummed_as_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "chunk.bin"
    path.write_bytes(os.urandom(3 << 20))
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            running = 0
            for start in range(0, len(view), 1 << 20):
                running = crc32(view[start : start + (1 << 20)], running)
        finally:
            view.release()
    assert running == zlib.crc32(path.read_bytes())


def test_without_the_extra_zlib_computes_it() -> None:
    probe = "import sys\nsys.modules['isal'] = None\nimport zlib\nfrom ckptspec._crc32 import crc32\nprint(crc32 is zlib.crc32)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "True"
