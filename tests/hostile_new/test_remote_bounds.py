"""A length a remote file declares costs only the bytes the object has: a pickle opcode claiming
petabytes is a truncated pickle, as it is for a local file, never an allocation of that size."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from ckptspec import audit
from ckptspec._storage import location
from ckptspec.formats._source import _WINDOWS, open_source
from ckptspec.formats._names import LEGACY_TORCH_MAGIC

from ._store import PROTOCOL, HostileStore

CLAIMED = 1 << 50


@pytest.mark.parametrize(
    "opcode",
    [
        b"\x8e" + struct.pack("<Q", CLAIMED),  # BINBYTES8
        b"\x8d" + struct.pack("<Q", CLAIMED),  # BINUNICODE8
        b"\x96" + struct.pack("<Q", CLAIMED),  # BYTEARRAY8
        b"\x8b" + struct.pack("<i", (1 << 31) - 1),  # LONG4
    ],
)
@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_declared_length_past_the_end_is_a_truncated_pickle(store: type[HostileStore], tmp_path: Path, opcode: bytes, where: str) -> None:
    payload = LEGACY_TORCH_MAGIC + b"\x80\x04" + opcode + b"x" * 100 + b"."
    if where == "remote":
        store.put_raw("/upload/model.pt", payload)
        root = f"{PROTOCOL}://upload"
    else:
        (tmp_path / "model.pt").write_bytes(payload)
        root = str(tmp_path)

    ((result),) = audit([root]).results

    unreadable = [f.message for f in result.findings if f.code == "CKS001"]
    assert "CKS009" not in {f.code for f in result.findings}  # not a crash of the validation
    assert len(unreadable) == 1 and "pickle 2 of 5 (protocol version)" in unreadable[0] and "model.pt:" in unreadable[0]


def test_a_legacy_torch_record_longer_than_one_request_reads_as_it_does_locally(store: type[HostileStore], tmp_path: Path) -> None:
    """A pickle string of 200 kB spans several ranged requests: it is read whole, not taken for a
    truncated pickle (a false alarm on a sound file)."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.pt"
    torch.save({"note": "x" * 200_000, "w": torch.zeros(4)}, path, _use_new_zipfile_serialization=False)
    store.put_raw("/upload/model.pt", path.read_bytes())

    ((local,), (remote,)) = audit([str(tmp_path)]).results, audit([f"{PROTOCOL}://upload"]).results

    assert [f.code for f in remote.findings] == [f.code for f in local.findings]
    assert "CKS001" not in {f.code for f in remote.findings}


def test_the_window_cache_stays_bounded_whatever_the_number_and_size_of_files(store: type[HostileStore]) -> None:
    for index in range(200):
        store.put_raw(f"/upload/{index}.bin", bytes([index % 256]) * (300 << 10))
    for index in range(200):
        source = open_source(location(f"{PROTOCOL}://upload/{index}.bin"))
        for offset in (0, 100 << 10, 200 << 10):
            assert source.pread(offset, 100 << 10) == bytes([index % 256]) * (100 << 10)
        source.close()

    windows = list(_WINDOWS._windows.values())
    assert len(windows) <= 32 and sum(map(len, windows)) <= 32 * (128 << 10)
