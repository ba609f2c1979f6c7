"""An index naming more shards than the process may hold open is read whole: shards are closed while
others are read and reopened when read again, and a shard that changed in between is an error."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ckptspec import CorruptCheckpointError
from ckptspec.formats.safetensors import open_safetensors

DESCRIPTORS = 128
SHARDS = 150


def _sharded(directory: Path, shards: int) -> Path:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch = pytest.importorskip("torch")
    weight_map = {}
    for index in range(shards):
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_torch.save_file({f"layer{index}": torch.full((4,), float(index))}, directory / name)
        weight_map[f"layer{index}"] = name
    index_file = directory / "model.safetensors.index.json"
    index_file.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index_file


def _limited(*arguments: object) -> subprocess.CompletedProcess[str]:
    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return subprocess.run(
        [sys.executable, "-m", "ckptspec", *map(str, arguments)],
        capture_output=True, text=True, preexec_fn=limit_descriptors, timeout=120,
    )  # fmt: skip


def test_an_index_of_more_shards_than_descriptors_is_adopted_validated_and_inspected(tmp_path: Path) -> None:
    index_file = _sharded(tmp_path, SHARDS)  # each open shard holds two descriptors: its file and its mapping
    adopted = _limited("manifest", index_file)
    assert adopted.returncode == 0, adopted.stderr
    validated = _limited("validate", index_file)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    inspected = _limited("inspect", "--format", "json", "--tensors", index_file)
    assert inspected.returncode == 0, inspected.stderr
    assert len(json.loads(inspected.stdout)["tensors"]) == SHARDS


def test_a_damaged_shard_among_many_is_still_named(tmp_path: Path) -> None:
    index_file = _sharded(tmp_path, SHARDS)
    assert _limited("manifest", index_file).returncode == 0
    shard = tmp_path / f"model-00003-of-{SHARDS:05d}.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    validated = _limited("validate", index_file)
    assert validated.returncode == 1, validated.stderr
    assert "layer2" in validated.stdout


def test_a_shard_that_changes_while_closed_is_not_read_as_the_one_parsed(tmp_path: Path) -> None:
    index_file = _sharded(tmp_path, SHARDS)
    with open_safetensors(index_file) as checkpoint:
        first = checkpoint.tree["layer0"]
        shard = tmp_path / f"model-00001-of-{SHARDS:05d}.safetensors"
        shard.write_bytes(shard.read_bytes())  # the same bytes, written again: another modification time
        os.utime(shard, ns=(0, 0))
        with pytest.raises(CorruptCheckpointError, match="changed while it was being read"):
            first.crc32c()
