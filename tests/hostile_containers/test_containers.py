"""Every container a loader unpickles from is opened, bounded, and each pickle in it judged and named
under the container's name; what cannot be opened fails intake with the reason named. Each class is
built here, judged by the real command line under a memory limit, and (for the key classes) shown to
run its payload under the real loader; a benign twin of each passes."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import pickle
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy
import pytest

from ckptspec.adopt import adopt

from .._payloads import SystemCall
from .conftest import judge_all, run_loader


def _npy(array: numpy.ndarray) -> bytes:
    buffer = io.BytesIO()
    numpy.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _respelled(npy: bytes, descr: str) -> bytes:
    """The `.npy` bytes `npy` with its header's descr written `descr`, padded as numpy pads."""
    length = int.from_bytes(npy[8:10], "little")
    header = npy[10 : 10 + length].decode("latin1")
    start = header.index("'descr':") + len("'descr':")
    end = header.index(", 'fortran_order'")
    header = (header[:start] + " " + descr + header[end:]).rstrip()
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return npy[:8] + len(header).to_bytes(2, "little") + header.encode("latin1") + npy[10 + length :]


def _object_npy(marker: Path, descr: str = "'|O'") -> bytes:
    return _respelled(_npy(numpy.array([SystemCall(f"touch {marker}")], dtype=object)), descr)


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _payload(marker: Path, protocol: int = 4) -> bytes:
    return pickle.dumps([SystemCall(f"touch {marker}"), 1], protocol=protocol)


def _structured_npy(marker: Path) -> bytes:
    """An object hidden two levels down a structured dtype, in a sub-array field."""
    dtype = numpy.dtype([("x", "<f8"), ("inner", [("y", "<i4"), ("z", "O", (1,))])])
    array = numpy.zeros(1, dtype=dtype)
    array["inner"]["z"][0, 0] = SystemCall(f"touch {marker}")
    return _npy(array)


def _dict_form_npy(marker: Path) -> bytes:
    return _respelled(_object_npy(marker), "{'names': ['a'], 'formats': ['O8']}")


def _encrypted(marker: Path) -> bytes:
    data = bytearray(_zip({"x.pkl": _payload(marker)}))
    data[6] |= 1  # the traditional encryption flag, in the local header and the central directory
    central = data.rindex(b"PK\x01\x02")
    data[central + 8] |= 1
    return bytes(data)


def _legacy_torch(value: object, protocol: int = 2) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    return buffer.getvalue()


def _legacy_hostile(marker: Path, protocol: int = 2) -> bytes:
    import torch

    return _legacy_torch({"hook": SystemCall(f"touch {marker}"), "w": torch.ones(2)}, protocol)  # the call comes before any storage


def _legacy_tar(marker: Path) -> bytes:
    """torch < 0.4's tar layout: `storages` and `tensors` (counts, here none) and the object `pickle`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in {"storages": pickle.dumps(0, 2) + pickle.dumps([], 2), "tensors": pickle.dumps(0, 2),
                           "pickle": pickle.dumps(SystemCall(f"touch {marker}"), 2)}.items():  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _legacy_tar_after_storage(marker: Path) -> bytes:
    """The legacy tar layout with one storage record (its arguments, its length, its raw elements)
    before the second record's pickle, which runs the call: `torch.load` reaches it."""
    storage_arguments = b"(S'0'\nS'cpu'\nctorch\nFloatStorage\ntp0\n."
    storages = pickle.dumps(2, 2) + storage_arguments + (3).to_bytes(8, "little") + bytes(12) + pickle.dumps(SystemCall(f"touch {marker}"), 2)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in {"storages": storages, "tensors": pickle.dumps(0, 2), "pickle": pickle.dumps({"a": 1}, 2)}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _legacy_tar_records() -> bytes:
    """The legacy tar layout with real records: two storages (float, double) and a tensor on one."""
    def storage(key: str, kind: str, elements: int, size: int) -> bytes:
        arguments = f"(S'{key}'\nS'cpu'\nctorch\n{kind}Storage\ntp0\n.".encode()
        return arguments + elements.to_bytes(8, "little") + bytes(elements * size)

    tensor = b"(S't0'\nS'0'\nctorch\nFloatTensor\ntp0\n." + (1).to_bytes(4, "little") + bytes(4) + (3).to_bytes(8, "little") * 2 + bytes(8)
    members = {"storages": pickle.dumps(2, 2) + storage("0", "Float", 3, 4) + storage("1", "Double", 2, 8) + pickle.dumps([], 2),
               "tensors": pickle.dumps(1, 2) + tensor, "pickle": pickle.dumps({"epoch": 1}, 2)}  # fmt: skip
    return _tar(members)


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _computed_name(marker: Path) -> bytes:
    """STACK_GLOBAL of a module name a call builds (`str('posix')`), not a string the pickle holds."""
    def text(value: str) -> bytes:
        return b"\x8c" + bytes([len(value)]) + value.encode()

    return (b"\x80\x04" + text("builtins") + text("str") + b"\x93" + text("posix") + b"\x85R" + text("system") + b"\x93"
            + text(f"touch {marker}") + b"\x85R.")  # fmt: skip


_HOSTILE: dict[str, tuple[str, Callable[[Path], bytes], str, str]] = {
    # name: (file name, build, rule, member named)
    **{f"npy-{descr}": (f"objects-{index}.npy", lambda m, d=descr: _object_npy(m, d), "CKS401", f"objects-{index}.npy")
       for index, descr in enumerate(["'O'", "'<O'", "'O8'", "'|O8'", "'object'"])},
    "npy-structured-nested": ("structured.npy", _structured_npy, "CKS401", "structured.npy"),
    "npy-dict-form": ("dictform.npy", _dict_form_npy, "CKS401", "dictform.npy"),
    "npz-stored": ("stored.npz", lambda m: _zip({"weights.npy": _npy(numpy.zeros(3)), "arr_0.npy": _object_npy(m, "'O'")}),
                   "CKS401", "stored.npz!arr_0.npy"),
    "npz-deflated": ("deflated.npz", lambda m: _zip({"arr_0.npy": _object_npy(m, "'<O'")}, zipfile.ZIP_DEFLATED),
                     "CKS401", "deflated.npz!arr_0.npy"),
    "zip-nested-folder": ("model.zip", lambda m: _zip({"model/x.pkl": _payload(m)}), "CKS401", "model.zip!model/x.pkl"),
    "zip-root-data-pkl": ("root.zip", lambda m: _zip({"data.pkl": _payload(m)}), "CKS401", "root.zip!data.pkl"),
    "zip-climbing-name": ("climb.zip", lambda m: _zip({"../x.pkl": _payload(m)}), "CKS401", "climb.zip!../x.pkl"),
    "zip-in-zip": ("outer.zip", lambda m: _zip({"inner.zip": _zip({"deep/x.pkl": _payload(m)}, zipfile.ZIP_DEFLATED)}),
                   "CKS401", "outer.zip!inner.zip!deep/x.pkl"),
    "pickle-then-zip": ("appended.pkl", lambda m: pickle.dumps({"epoch": 1}, 2) + _zip({"model/x.pkl": _payload(m)}),
                        "CKS401", "appended.pkl!model/x.pkl"),
    "bytes-then-zip": ("prefixed.bin", lambda m: b"not a format" * 8 + _zip({"x.pkl": _payload(m)}), "CKS401", "prefixed.bin!x.pkl"),
    "gzip": ("model.pkl.gz", lambda m: gzip.compress(_payload(m)), "CKS401", "model.pkl.gz!(decompressed)"),
    "bz2": ("model.pkl.bz2", lambda m: bz2.compress(_payload(m)), "CKS401", "model.pkl.bz2!(decompressed)"),
    "xz": ("model.pkl.xz", lambda m: lzma.compress(_payload(m)), "CKS401", "model.pkl.xz!(decompressed)"),
    "zlib-joblib": ("model.joblib", lambda m: zlib.compress(_payload(m)), "CKS401", "model.joblib!(decompressed)"),
    "7z": ("weights.7z", lambda m: b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(64), "CKS405", "weights.7z"),
    "zip-encrypted-member": ("locked.zip", _encrypted, "CKS001", "locked.zip"),  # torch's strict reader names the flag
    "zip-in-zip-encrypted-member": ("box.zip", lambda m: _zip({"locked.zip": _encrypted(m)}), "CKS405", "box.zip!locked.zip!x.pkl"),
    "legacy-torch-protocol-0": ("legacy0.pt", lambda m: _legacy_hostile(m, 0), "CKS401", "legacy0.pt"),
    "legacy-torch-protocol-1": ("legacy1.pt", lambda m: _legacy_hostile(m, 1), "CKS401", "legacy1.pt"),
    "legacy-torch-protocol-4": ("legacy4.pt", lambda m: _legacy_hostile(m, 4), "CKS401", "legacy4.pt"),
    "legacy-torch-trailing-bytes": ("trailing.pt", lambda m: _legacy_hostile(m) + b"trailing bytes", "CKS401", "trailing.pt"),
    "legacy-torch-tar": ("old.tar", _legacy_tar, "CKS401", "old.tar!pickle"),
    "legacy-torch-tar-after-storage": ("old2.tar", _legacy_tar_after_storage, "CKS401", "old2.tar!storages"),
    "computed-stack-global": ("computed.pkl", _computed_name, "CKS401", "computed.pkl"),
    "protocol-0": ("p0.pkl", lambda m: _payload(m, 0), "CKS401", "p0.pkl"),
    "protocol-0-unquoted-string": ("p0-string.pkl", lambda m: _payload(m, 0)[:-4] + b"S unquoted\n.", "CKS401", "p0-string.pkl"),
    "protocol-0-unknown-opcode": ("p0-opcode.pkl", lambda m: _payload(m, 0)[:-4] + b"\xfe.", "CKS401", "p0-opcode.pkl"),
    "protocol-0-truncated": ("p0-cut.pkl", lambda m: _payload(m, 0)[:-4], "CKS401", "p0-cut.pkl"),
    "protocol-1-truncated": ("p1-cut.pkl", lambda m: _payload(m, 1)[:-3], "CKS401", "p1-cut.pkl"),
    # protocols 0 and 1 have no signature: under a name that says nothing, the opcodes tell
    "zip-neutral-name-protocol-0": ("neutral.zip", lambda m: _zip({"weights": _payload(m, 0)}), "CKS401", "neutral.zip!weights"),
    "zip-neutral-name-protocol-1": ("neutral1.zip", lambda m: _zip({"blob.dat": _payload(m, 1)}, zipfile.ZIP_DEFLATED),
                                    "CKS401", "neutral1.zip!blob.dat"),
    "zip-neutral-name-protocol-0-truncated": ("cut.zip", lambda m: _zip({"state": _payload(m, 0)[:-4]}), "CKS401", "cut.zip!state"),
    "gzip-neutral-name-protocol-0": ("blob.gz", lambda m: gzip.compress(_payload(m, 0)), "CKS401", "blob.gz!(decompressed)"),
    "tar-neutral-name-protocol-0": ("bundle.tar", lambda m: _tar({"x": _payload(m, 0)}), "CKS401", "bundle.tar!x"),
}

_BENIGN: dict[str, Callable[[], bytes]] = {
    "plain.npz": lambda: _zip({"a.npy": _npy(numpy.arange(4.0)), "b.npy": _npy(numpy.zeros((2, 2), "<i4"))}),
    "floats.npy": lambda: _npy(numpy.linspace(0, 1, 8)),
    "structured.npy": lambda: _npy(numpy.zeros(2, dtype=[("x", "<f8"), ("y", [("z", "<i2", (3,))])])),
    "objects-of-plain-values.npy": lambda: _npy(numpy.array([{"lr": 0.1}, [1, 2], "text"], dtype=object)),
    "json.zip": lambda: _zip({"config.json": json.dumps({"lr": 0.1}).encode(), "notes/readme.txt": b"hello"}),
    "protocol-0.pkl": lambda: pickle.dumps({"epoch": 3, "lr": 0.25, "steps": [1, 2]}, protocol=0),
    "config.pkl.gz": lambda: gzip.compress(pickle.dumps({"epoch": 3}, protocol=4)),
    "legacy-protocol-0.pt": lambda: _legacy_torch({"epoch": 3, "lr": 0.1}, 0),
    "legacy-records.tar": _legacy_tar_records,
    "config.json.gz": lambda: gzip.compress(json.dumps({"lr": 0.1, "epochs": [1, 2]}).encode()),
    "notes.txt.xz": lambda: lzma.compress(b"cat\nfood\nSome notes, line after line.\n" * 100),
    "text-and-state.zip": lambda: _zip({"README": b"cat\nfood\n", "state": pickle.dumps({"epoch": 3, "lr": 0.5}, protocol=0)}),
}
_BENIGN_CHECKPOINTS = ("legacy.pt",)
"""Benign twins that are checkpoints, judged with the manifest `ckptspec manifest` writes for them."""


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, Path], dict]]:
    directory = tmp_path_factory.mktemp("containers")
    for file_name, build, _rule, _member in _HOSTILE.values():
        (directory / file_name).write_bytes(build(directory / f"{file_name}.ran"))
    for file_name, build_benign in _BENIGN.items():
        (directory / f"benign-{file_name}").write_bytes(build_benign())
    import torch

    (directory / "benign-legacy.pt").write_bytes(_legacy_torch({"model": {"w": torch.ones(3)}, "epoch": 2}))
    adopt(directory / "benign-legacy.pt")
    paths = sorted(path for path in directory.iterdir() if not path.name.endswith((".ran", ".yaml")))
    return directory, judge_all(paths)


def _findings(verdict: dict) -> list[dict]:
    return [finding for result in json.loads(verdict["stdout"])["results"] for finding in result["findings"]]


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_a_hostile_container_fails_intake_with_the_danger_and_the_member_named(judged: tuple[Path, dict], case: str) -> None:
    directory, verdicts = judged
    file_name, _build, rule, member = _HOSTILE[case]
    path = directory / file_name
    for command in ("audit", "validate"):
        verdict = verdicts[command, path]
        assert verdict["code"] == 1, (command, verdict)
        findings = _findings(verdict)
        named = [f for f in findings if f["code"] == rule]
        assert named and all("CKS009" != f["code"] for f in findings), findings
        assert any(f["file"].endswith(member) for f in named), named
        if rule == "CKS401":
            assert any(danger in f["message"] for f in named for danger in ("posix.system", "<computed module>")), named
        else:
            assert any(("cannot be inspected" if rule == "CKS405" else "encryption") in f["message"] for f in named), named
    inspected = verdicts["inspect", path]
    assert "Traceback" not in inspected["stderr"] and inspected["code"] in (0, 2), inspected
    if inspected["code"] == 0 and rule == "CKS401":
        named_globals = {f"{g['module']}.{g['name']}" for g in json.loads(inspected["stdout"])["globals"]}
        assert "posix.system" in named_globals or "<computed module>.<computed name>" in named_globals
    assert not (directory / f"{file_name}.ran").exists(), "judging ran the payload"


@pytest.mark.parametrize("name", sorted([*_BENIGN, *_BENIGN_CHECKPOINTS]))
def test_the_benign_twin_passes(judged: tuple[Path, dict], name: str) -> None:
    directory, verdicts = judged
    path = directory / f"benign-{name}"
    verdict = verdicts["audit", path]
    assert "Traceback" not in verdict["stderr"], verdict
    if verdict["code"] == 2:  # a format that holds no code is listed, not judged: no checkpoint to audit
        assert "none a checkpoint" in verdict["stderr"], verdict
        return
    assert verdict["code"] == 0 and not [f for f in _findings(verdict) if f["severity"] == "error"], verdict


_NUMPY_LOADS = "import numpy, sys\nnumpy.load(sys.argv[1], allow_pickle=True)\n"
_NPZ_LOADS = "import numpy, sys\nwith numpy.load(sys.argv[1], allow_pickle=True) as f:\n    [f[k] for k in f.files]\n"
_PICKLE_LOADS = "import pickle, sys\npickle.load(open(sys.argv[1], 'rb'))\n"
_ZIP_LOADS = "import pickle, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\npickle.loads(z.read(sys.argv[2]))\n"
_TORCH_LOADS = "import sys, torch\ntorch.load(sys.argv[1], weights_only=False)\n"
_GZIP_LOADS = "import gzip, pickle, sys\npickle.load(gzip.open(sys.argv[1]))\n"


@pytest.mark.parametrize(
    ("case", "script", "extra"),
    [("npy-'O8'", _NUMPY_LOADS, ()), ("npy-structured-nested", _NUMPY_LOADS, ()), ("npz-deflated", _NPZ_LOADS, ()),
     ("protocol-0-unquoted-string", _PICKLE_LOADS, ()), ("protocol-1-truncated", _PICKLE_LOADS, ()),
     ("zip-nested-folder", _ZIP_LOADS, ("model/x.pkl",)), ("gzip", _GZIP_LOADS, ()), ("legacy-torch-tar", _TORCH_LOADS, ()),
     ("legacy-torch-protocol-0", _TORCH_LOADS, ()), ("computed-stack-global", _PICKLE_LOADS, ()),
     ("zip-neutral-name-protocol-0", _ZIP_LOADS, ("weights",)), ("zip-neutral-name-protocol-0-truncated", _ZIP_LOADS, ("state",)),
     ("gzip-neutral-name-protocol-0", _GZIP_LOADS, ()), ("legacy-torch-tar-after-storage", _TORCH_LOADS, ())],
)  # fmt: skip
def test_the_real_loader_runs_what_was_judged(judged: tuple[Path, dict], case: str, script: str, extra: tuple[str, ...]) -> None:
    directory, _verdicts = judged
    file_name = _HOSTILE[case][0]
    marker = directory / f"{file_name}.ran"
    run_loader(script, directory / file_name, *extra)
    assert marker.exists(), f"{case}: the real loader did not run the payload"
