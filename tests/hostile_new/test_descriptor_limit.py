"""Out of file descriptors mid-read (an index naming more shards than the process may hold open) is
an error naming the shard, never an internal error."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

DESCRIPTORS = 128


def test_an_index_of_more_shards_than_descriptors_names_the_shard_it_could_not_open(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch = pytest.importorskip("torch")
    weight_map = {}
    for index in range(DESCRIPTORS):  # each shard read holds two descriptors: its file and its mapping
        name = f"model-{index:05d}-of-{DESCRIPTORS:05d}.safetensors"
        safetensors_torch.save_file({f"layer{index}": torch.zeros(2)}, tmp_path / name)
        weight_map[f"layer{index}"] = name
    index_file = tmp_path / "model.safetensors.index.json"
    index_file.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    result = subprocess.run(
        [sys.executable, "-m", "ckptspec", "inspect", str(index_file)], capture_output=True, text=True, preexec_fn=limit_descriptors, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert ".safetensors: cannot read: Too many open files" in result.stderr
