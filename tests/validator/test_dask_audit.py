"""`audit --executor dask`: the same results as the local process pool, on a real Dask LocalCluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptspec._dask import dask_executor
from ckptspec._validate import audit
from ckptspec.report import render_json

from .conftest import copy_checkpoint, run_cli

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def audited_tree(lightning_checkpoint: Path, torch_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eleven checkpoints, one of them damaged."""
    root = tmp_path_factory.mktemp("dask-tree")
    for index in range(10):
        copy_checkpoint(lightning_checkpoint if index % 2 else torch_checkpoint, root / f"run{index}")
    damaged = copy_checkpoint(lightning_checkpoint, root / "damaged")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x40
    damaged.write_bytes(bytes(data))
    return root


def test_dask_results_equal_the_local_pool(audited_tree: Path, specs: dict[str, Path]) -> None:
    local = audit([audited_tree], specs["lightning"], jobs=2)
    on_dask = audit([audited_tree], specs["lightning"], jobs=2, executor=dask_executor("dask"))
    assert len(on_dask.results) == 11 and not on_dask.passed
    assert render_json(on_dask) == render_json(local)


def test_command_line_executor(audited_tree: Path) -> None:
    code, out, err = run_cli("audit", audited_tree, "--executor", "dask", "--jobs", "2", "--format", "json")
    assert code == 1 and len(json.loads(out)["results"]) == 11, err
    code, _, err = run_cli("audit", audited_tree, "--executor", "ray")
    assert code == 2 and "expected local, dask or dask://HOST:PORT" in err
