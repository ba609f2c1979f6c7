"""A damaged file reads the same from a bucket as from a disk: the ranged reads that replace pread
and mmap for remote files (`formats/_source.py`) reach the same verdict, finding for finding."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import audit

from ._store import PROTOCOL, HostileStore

_EXAMPLES = int(os.environ.get("CKPTSPEC_FUZZ_EXAMPLES", "60"))

positions = st.one_of(st.integers(0, 2047), st.integers(-2048, -1), st.integers(0, 1 << 20))
"""Most of a file is tensor bytes; its structure lies in the first and last few kilobytes."""
mutations = st.lists(st.tuples(positions, st.integers(0, 255)), min_size=1, max_size=4)


def _verdict(root: str, prefix: str) -> list[tuple[str, str]]:
    (result,) = audit([root]).results
    return [(finding.code, finding.message.replace(prefix, "<upload>")) for finding in result.findings]


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["torch-zip", "legacy-torch", "safetensors"]), changes=mutations, cut=st.one_of(st.none(), st.floats(0.05, 1)))
def test_a_damaged_file_reads_the_same_locally_and_remotely(
    real_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, kind: str, changes: list[tuple[int, int]], cut: float | None
) -> None:
    name = real_files[kind].name
    payload = bytearray(real_files[kind].read_bytes())
    for where, value in changes:
        payload[where % len(payload)] = value
    if cut is not None:
        payload = payload[: max(1, int(cut * len(payload)))]
    local = tmp_path_factory.mktemp("local")
    (local / name).write_bytes(payload)
    HostileStore.reset()
    HostileStore.put_raw(f"/upload/{name}", bytes(payload))

    assert _verdict(f"{PROTOCOL}://upload", f"{PROTOCOL}:///upload") == _verdict(str(local), str(local))
