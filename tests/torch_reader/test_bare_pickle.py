"""Bare pickle files (`pickle.dump`, not `torch.save`): recognised, and inspected for what they would call."""

from __future__ import annotations

import json
import os
import pickle
from collections import OrderedDict
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import UnsupportedFormatError
from ckptspec.cli import cli
from ckptspec.formats._pickle_protocol import pickle_protocol
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.torchzip import open_torch_checkpoint

from .._payloads import SystemCall

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_is_recognised_and_its_globals_listed(protocol: int, tmp_path: Path) -> None:
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps({"order": OrderedDict(a=1), "steps": [1, 2]}, protocol=protocol))
    assert detect(path).kind == "pickle"
    inspection = inspect_checkpoint(path)
    assert inspection.to_json() == {
        "inspection": 1,
        "path": str(path),
        "format": "pickle",
        "files": [{"path": str(path), "size": path.stat().st_size}],
        "metadata": {"pickle_protocol": protocol},
        "summary": {"tensor_count": 0, "nbytes": 0, "dtypes": {}},
        "components": [],
        "globals": [{"module": "collections", "name": "OrderedDict", "safety": "allowed", "count": 1}],
    }


def test_tensors_pickled_by_pickle_dump_are_listed_and_their_torch_load_is_dangerous(tmp_path: Path) -> None:
    path = tmp_path / "weights.pkl"
    with path.open("wb") as handle:
        pickle.dump(torch.nn.Linear(2, 2).state_dict(), handle)
    safety = {g.qualname: g.safety for g in inspect_checkpoint(path).globals}
    assert safety["torch._utils._rebuild_tensor_v2"] == "allowed"
    # Unpickling it calls torch.load(weights_only=False) on bytes that nothing has scanned.
    assert safety["torch.storage._load_from_bytes"] == "dangerous"


def test_cli_shows_what_a_malicious_pickle_would_call(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"w": torch.ones(2), "evil": SystemCall(f"touch {marker}")}, protocol=2))
    text = CliRunner().invoke(cli, ["inspect", str(path)])
    assert text.exit_code == 0, text.output
    words = " ".join(text.stdout.split())  # rich wraps long lines
    # 6: the storage type named by the pickle inside `_load_from_bytes`' bytes is listed too.
    assert f"{path} bare pickle, names 6 globals, 2 dangerous" in words
    assert f"{os.system.__module__}.system │ dangerous │ 1" in words
    document = json.loads(CliRunner().invoke(cli, ["inspect", "--format", "json", str(path)]).stdout)
    assert {"module": os.system.__module__, "name": "system", "safety": "dangerous", "count": 1} in document["globals"]
    assert not marker.exists()


@pytest.mark.parametrize(
    "content",
    [b"hello world.\n", b"I am not a pickle.", b"(dp0\nS'a'\np1\nI1\ns.trailing", b"\x80\x09not a protocol"],
    ids=["text", "text-ending-in-a-dot", "pickle-then-more", "proto-9"],
)
def test_other_files_are_not_taken_for_pickles(content: bytes, tmp_path: Path) -> None:
    (tmp_path / "file.bin").write_bytes(content)
    with pytest.raises(UnsupportedFormatError, match="not a checkpoint ckptspec reads"):
        detect(tmp_path / "file.bin")


def test_a_legacy_torch_file_is_not_a_bare_pickle(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert detect(tmp_path / "legacy.pt").kind == "torch-legacy"


def test_a_torch_zip_is_still_a_torch_zip(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "model.pt")
    assert detect(tmp_path / "model.pt").kind == "torch-zip"


def test_the_torch_reader_refuses_a_bare_pickle_by_name(tmp_path: Path) -> None:
    (tmp_path / "state.pkl").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(UnsupportedFormatError, match=r"state\.pkl: a bare pickle, not a torch\.save archive$"):
        open_torch_checkpoint(tmp_path / "state.pkl")


@pytest.mark.parametrize("protocol", [0, 1])
def test_protocol_of_a_pickle_without_proto_is_the_highest_its_opcodes_need(protocol: int) -> None:
    assert pickle_protocol(pickle.dumps([1, "a", OrderedDict()], protocol=protocol)) == protocol
