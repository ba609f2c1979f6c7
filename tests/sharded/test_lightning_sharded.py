"""`CkptspecCallback` under Lightning's ModelParallelStrategy, 2 real CPU processes (gloo, tensor
parallel on a CPU mesh: one weight split by rows, one by columns): the strategy saves each checkpoint
as a directory of DCP files and `meta.pt` without the CheckpointIO, and the callback writes the
directory's manifest, which validates without torch.

FSDPStrategy is not exercised: Lightning 2.6 refuses it without a CUDA accelerator, and torch's
FullyShardedDataParallel itself needs an accelerator device. It saves the same layout through the
same `_distributed_checkpoint_save` (see the `lightning_dir` fixture) and the same wrapped
`save_checkpoint`, so its manifest is written the same way; only running it is left out."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ckptspec import validate
from ckptspec._documents import load_manifest
from ckptspec._sidecars import manifest_path_for
from ckptspec.formats.dcp import open_dcp_directory

from . import _lightning_ddp
from ._lightning_ddp import BATCH, SAMPLES, WORLD
from ._torchless import without_torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def model_parallel_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lightning-model-parallel")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_lightning_ddp.fit_model_parallel, args=(str(root), port), nprocs=WORLD, join=True)
    return root / "checkpoints" / f"epoch=0-step={SAMPLES // BATCH}.ckpt"  # both ranks see every batch


def test_the_sharded_directory_gets_a_manifest_that_validates_without_torch(model_parallel_checkpoint: Path) -> None:
    directory = model_parallel_checkpoint
    assert directory.is_dir() and (directory / "meta.pt").is_file()
    manifest = load_manifest(manifest_path_for(directory))
    assert manifest.format == "lightning" and manifest.checkpoint == directory.name
    layout = open_dcp_directory(directory)
    assert layout.ranks == [0, 1]
    chunks = {tensor.fqn: sorted(chunk.offsets for chunk in tensor.chunks) for tensor in layout.tensors}
    assert chunks["state_dict.layer.0.weight"] == [(0, 0), (8, 0)] and chunks["state_dict.layer.2.weight"] == [(0, 0), (0, 8)]
    shapes = {tensor.fqn.removeprefix("state_dict."): list(tensor.shape) for tensor in layout.tensors}
    model = manifest.components.model
    assert model is not None and {t.name: t.shape for t in model.tensors} == {
        "layer.0.weight": [16, 4], "layer.0.bias": [16], "layer.2.weight": [1, 16], "layer.2.bias": [1],
    } == {name: shape for name, shape in shapes.items() if name.startswith("layer.")}  # fmt: skip
    assert all(t.crc32c is not None for t in model.tensors)
    ranks = manifest.components.ranks
    assert ranks is not None and ranks.world_size == WORLD and [s.rank for s in ranks.states] == [0, 1]
    assert manifest.components.rng is not None and manifest.components.config is not None
    assert manifest.components.config.modules, "the callback records the construction constants adoption cannot know"
    checked = without_torch("validate", directory)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_deleted_rank_file_is_named(model_parallel_checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    directory = Path(shutil.copytree(model_parallel_checkpoint, tmp_path / model_parallel_checkpoint.name))
    shutil.copy(manifest_path_for(model_parallel_checkpoint), manifest_path_for(directory))
    assert not [f for f in validate(directory).findings if f.severity == "error"]
    (directory / "__1_0.distcp").unlink()
    found = [f"{f.pointer}: {f.message}" for f in validate(directory).findings if f.code == "CKS238"]
    assert any("rank 1 file __1_0.distcp" in line and "/state_dict/layer.0.weight" in line for line in found), found


def test_resume_from_the_sharded_directory_is_checked_on_every_rank(model_parallel_checkpoint: Path) -> None:
    """ModelParallelStrategy loads the checkpoint after `on_fit_start`; the callback still checks the
    gathered model against the manifest (the column-split weight put back in chunk order for its
    CRC32C) and gives each rank its generators back."""
    root = model_parallel_checkpoint.parents[1]
    for rank in range(WORLD):
        result = json.loads((root / f"rank{rank}.json").read_text())
        saved, restored = result["weights"]
        assert restored == saved  # a resume with max_epochs=1 trains nothing further
        assert result["tensors"] == [4, 4]
        assert result["generators"] == ["numpy", "python", "torch"]
        assert not any("not recorded" in note for note in result["notes"]), result["notes"]
