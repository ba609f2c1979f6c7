"""Hostile shapes rather than hostile calls: pickles that stop half-way, memo abuse, billion laughs, deep nesting."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ckptspec import manifest_path_for
from ckptspec.adopt import adopt
from ckptspec.formats.barepickle import open_bare_pickle

from ._gadgets import call, name, whole
from .conftest import dangerous_named, judge, prove

torch = pytest.importorskip("torch")
if not Path("/proc/self/status").is_file():
    pytest.skip("peak memory is read from /proc/self/status (Linux)", allow_module_level=True)

SECONDS = 5.0
MEMORY_KIB = 256 * 1024

# CPU seconds, not wall time: the bound is on the work done, which other processes sharing the machine
# do not change. Peak memory from VmHWM: unlike getrusage's ru_maxrss, it is not inherited across exec.
_MEASURED = """\
import json, re, sys, time
from ckptspec.cli import cli
started = time.process_time()
try:
    cli.main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
with open("/proc/self/status") as status:
    kib = int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
print(json.dumps({"seconds": time.process_time() - started, "kib": kib}), file=sys.stderr)
"""


def _measured(*args: str | Path) -> dict[str, float]:
    completed = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, args)], capture_output=True, text=True, timeout=120)
    return json.loads(completed.stderr.strip().splitlines()[-1])


def _system(marker: Path) -> bytes:
    return call(name("os", "system"), f"touch {marker}")


STOPPED = {
    "unknown-opcode-after-the-call": lambda m: b"\x80\x04" + _system(m) + b"\xff.",
    "truncated-before-stop": lambda m: b"\x80\x04" + _system(m),
    "get-of-a-memo-never-stored": lambda m: b"\x80\x04" + _system(m) + b"h\x09.",
}


@pytest.mark.parametrize("shape", sorted(STOPPED))
def test_a_pickle_that_stops_half_way_still_names_its_danger(tmp_path: Path, shape: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "stopped.pkl"
    path.write_bytes(STOPPED[shape](marker))
    code, result = judge(path)
    assert code == 1 and {f["code"] for f in result["findings"]} >= {"CKS401"}
    assert "os.system" in dangerous_named(result) and not marker.exists()
    prove("pickle", [path])
    assert marker.exists(), "the real loader did not run the call before stopping"


SECOND_PICKLES = {
    "protocol-4": lambda m: whole(_system(m)),
    "protocol-0-text": lambda m: f"cos\nsystem\n(V touch {m}\ntR.".encode(),
}


@pytest.mark.parametrize("second", sorted(SECOND_PICKLES))
def test_every_pickle_of_a_stream_is_judged(tmp_path: Path, second: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "stream.pkl"
    path.write_bytes(whole(call(name("builtins", "dict"))) + SECOND_PICKLES[second](marker))
    assert "os.system" in {ref.qualname for ref in open_bare_pickle(path).globals if ref.safety == "dangerous"}
    loader = "import pickle, sys\nwith open(sys.argv[1], 'rb') as f:\n    pickle.load(f); pickle.load(f)\n"
    subprocess.run([sys.executable, "-c", loader, str(path)], check=True, timeout=60)
    assert marker.exists()


def test_a_memo_index_far_beyond_the_bytes_is_refused_cheaply(tmp_path: Path) -> None:
    path = tmp_path / "memo.pkl"
    path.write_bytes(b"\x80\x02N" + b"r\xff\xff\xff\x0f" + b".")  # the C unpickler would allocate 2 GiB for it
    code, result = judge(path)
    assert code == 1 and "memo index 268435455" in result["findings"][0]["message"]
    measured = _measured("validate", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


@pytest.fixture(scope="module")
def laughs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Lightning-shaped checkpoint whose hyper-parameters expand to 10**30 values through the memo."""
    nested_list: object = [1.5]
    nested_dict: object = {"leaf": 1}
    for _ in range(30):
        nested_list = [nested_list] * 10
        nested_dict = {f"k{index}": nested_dict for index in range(10)}
    path = tmp_path_factory.mktemp("laughs") / "laughs.ckpt"
    torch.save({
        "pytorch-lightning_version": "2.6.6", "epoch": 0, "global_step": 4, "state_dict": {"w": torch.ones(2)},
        "hyper_parameters": {"laughs": nested_list, "tree": nested_dict}, "hparams_name": "kwargs",
        "optimizer_states": [], "lr_schedulers": [], "loops": {}, "callbacks": {},
    }, path)  # fmt: skip
    return path


@pytest.mark.parametrize("command", ["manifest", "validate", "inspect", "diff"])
def test_billion_laughs_cost_their_bytes_not_their_expansion(laughs: Path, command: str) -> None:
    arguments = {"manifest": ("--force",), "diff": (laughs,)}.get(command, ())
    measured = _measured(command, laughs, *arguments)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


def test_deep_nesting_is_read_without_recursion(tmp_path: Path) -> None:
    path = tmp_path / "deep.pkl"
    depth = 200_000
    path.write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
    code, result = judge(path)
    assert code == 0 and result["format"] == "pickle"
    measured = _measured("inspect", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


def test_a_manifest_that_compares_a_billion_laughs_value_stays_bounded(laughs: Path, tmp_path: Path) -> None:
    path = tmp_path / laughs.name
    shutil.copy(laughs, path)
    adopt(path)
    manifest = yaml.safe_load(manifest_path_for(path).read_text())
    manifest["components"]["config"]["hyperparameters"].update({"laughs": [1.5], "tree": {"k0": 1}})
    manifest_path_for(path).write_text(yaml.safe_dump(manifest))
    measured = _measured("validate", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


def test_a_torch_archive_whose_pickle_stops_at_a_bad_persistent_id_still_names_its_danger(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "stopped.pt"
    pickled = b"\x80\x02}(" + _entry("a", _system(marker)) + _entry("b", b"\x8c\x03badQ") + b"u."
    writer = torch._C.PyTorchFileWriter(str(path))  # torch's own archive writer, records as torch lays them out
    writer.write_record("data.pkl", pickled, len(pickled))
    writer.write_record("byteorder", b"little", 6)
    writer.write_end_of_file()
    del writer
    code, result = judge(path)
    assert code == 1 and {"CKS001", "CKS401"} <= {f["code"] for f in result["findings"]}
    assert "os.system" in dangerous_named(result) and not marker.exists()
    prove("torch", [path])
    assert marker.exists(), "torch.load did not run the call before the bad persistent id"


def _entry(key: str, value: bytes) -> bytes:
    return b"\x8c" + bytes([len(key)]) + key.encode() + value


def test_a_billion_laughs_persistent_id_is_named_in_a_few_elements(tmp_path: Path) -> None:
    pickled = b"\x80\x02]r\x00\x00\x00\x00K\x01a"
    for level in range(1, 40):  # each level: a list holding the previous one ten times, through the memo
        pickled += b"](" + (b"j" + (level - 1).to_bytes(4, "little")) * 10 + b"er" + level.to_bytes(4, "little")
    pickled += b"Q."
    path = tmp_path / "laughing-id.pt"
    writer = torch._C.PyTorchFileWriter(str(path))
    writer.write_record("data.pkl", pickled, len(pickled))
    writer.write_end_of_file()
    del writer
    code, result = judge(path)
    assert code == 1 and any("is not a torch storage" in f["message"] for f in result["findings"])
    measured = _measured("validate", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


def test_a_memo_shared_value_copied_by_a_builder_again_and_again_is_refused(tmp_path: Path) -> None:
    text = "a" * 1_000_000
    pickled = b"\x80\x02X" + len(text).to_bytes(4, "little") + text.encode() + b"r\x00\x00\x00\x000]("
    pickled += (b"c_codecs\nencode\nj\x00\x00\x00\x00X\x06\x00\x00\x00latin1\x86R") * 1000  # 1 GB of bytes objects
    path = tmp_path / "copies.pkl"
    path.write_bytes(pickled + b"e.")
    code, result = judge(path)
    assert code == 1 and "copy more values" in result["findings"][0]["message"]
    measured = _measured("validate", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured


@pytest.mark.parametrize("piece", [b"\x80\x02N.", b"\x80\x02cx\ny\n.", b"\x80\x02cx\ny\nC\x00\x85R."], ids=["data", "global", "global-and-bytes"])
def test_two_megabytes_of_tiny_pickles_in_a_stream_stay_bounded(tmp_path: Path, piece: bytes) -> None:
    path = tmp_path / "stream.pkl"
    path.write_bytes(piece * (2_000_000 // len(piece)))
    measured = _measured("validate", path)
    assert measured["seconds"] < SECONDS and measured["kib"] < MEMORY_KIB, measured
