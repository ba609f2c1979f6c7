"""Hostile TensorFlow index files: each is judged (a finding or a refusal) in seconds and flat memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._hostile_tf import HOSTILE

_MEASURE = """
import json, sys, time
from ckptspec._validate import validate
from ckptspec._exceptions import CkptspecError
from ckptspec.formats.inspect import inspect_checkpoint
outcomes, seconds = [], []
for run in (validate, inspect_checkpoint):
    started = time.process_time()
    try:
        outcomes.append(sorted({f.code for f in run(sys.argv[1]).findings}) if run is validate else run(sys.argv[1]).format)
    except CkptspecError as exc:
        outcomes.append(type(exc).__name__)
    seconds.append(time.process_time() - started)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
print(json.dumps({"seconds": max(seconds), "peak_mib": peak, "outcomes": outcomes}))
"""


@pytest.fixture(scope="session")
def hostile_prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: build(tmp_path_factory.mktemp(name)) for name, build in HOSTILE.items()}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_finishes_fast_in_flat_memory(hostile_prefixes: dict[str, Path], name: str) -> None:
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(hostile_prefixes[name])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    validated, inspected = measured["outcomes"]
    # Judged, never passed: a finding from validate, a refusal from inspect.
    assert "CKS009" not in validated and validated != [] and inspected in ("CorruptCheckpointError", "UnsupportedFormatError", "ReaderError")
    assert measured["seconds"] < 5 and measured["peak_mib"] < 256, measured


def test_a_varint_wider_than_64_bits_is_refused() -> None:
    from ckptspec.formats._protobuf import ProtobufDecodeError, read_varint

    assert read_varint(b"\xff" * 9 + b"\x01", 0) == ((1 << 64) - 1, 10)
    with pytest.raises(ProtobufDecodeError, match="does not fit in 64 bits"):
        read_varint(b"\xff" * 9 + b"\x02", 0)
