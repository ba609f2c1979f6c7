"""Hostile and malformed `.metadata` files, and the reader running where torch cannot be imported."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

from ckptspec import validate
from ckptspec.adopt import AdoptionRefused, adopt

from ._torchless import without_torch

@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DCP directory from `dcp.save` in one process: a model and its AdamW state."""
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 6)).sum().backward()
    optimizer.step()
    directory = tmp_path_factory.mktemp("single") / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=directory, no_dist=True)
    return directory


def _copy(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / source.name))


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(finding.message)
    return found


class _Gadget:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def test_a_gadget_in_metadata_is_dangerous_and_never_runs(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    marker = tmp_path / "ran"
    (directory / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": _Gadget(f"touch {marker}")}))
    codes = _codes(directory)
    assert any("system" in message for message in codes["CKS401"]), codes
    assert "CKS211" in codes  # and it is no DCP metadata
    assert not marker.exists()
    with pytest.raises(AdoptionRefused, match="dangerous-pickle-global"):
        adopt(directory)
    assert not directory.with_name("ckpt.ckptspec.yaml").exists()


def test_a_class_outside_the_allow_list_posing_as_metadata(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    real = (directory / ".metadata").read_bytes()
    forged = real.replace(b"torch.distributed.checkpoint.metadata", b"torch.distributed.checkpoint.metadatX", 1)
    (directory / ".metadata").write_bytes(forged)
    codes = _codes(directory)
    assert any("not a DCP Metadata" in message for message in codes["CKS211"]), codes


def _rewrite(directory: Path, edit: object) -> None:
    with (directory / ".metadata").open("rb") as handle:
        metadata = pickle.load(handle)
    edit(metadata)  # type: ignore[operator]
    with (directory / ".metadata").open("wb") as handle:
        pickle.dump(metadata, handle)


def test_a_path_leaving_the_directory_is_malformed(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)

    def escape(metadata: object) -> None:
        for info in metadata.storage_data.values():  # type: ignore[attr-defined]
            info.relative_path = "../../etc/passwd"

    _rewrite(directory, escape)
    assert any("relative_path" in message for message in _codes(directory)["CKS211"])


def test_huge_declared_shapes_allocate_nothing(saved: Path, tmp_path: Path) -> None:
    """A tensor declared with 10^24 elements in a million-by-million grid of chunks is judged from
    the few chunks the file holds, at once."""
    directory = _copy(saved, tmp_path)

    def inflate(metadata: object) -> None:
        weight = metadata.state_dict_metadata["model.weight"]  # type: ignore[attr-defined]
        weight.size = torch.Size([10**12, 10**12])
        weight.chunks.append(ChunkStorageMetadata(offsets=torch.Size([10**12 - 1, 0]), sizes=torch.Size([1, 10**12])))

    _rewrite(directory, inflate)
    codes = _codes(directory)
    assert any("gap" in message for message in codes["CKS237"]), codes


def test_inspect_adopt_validate_auditwithout_torch(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    inspected = without_torch("inspect", directory, "--format", "json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["summary"]["tensor_count"] == 8  # weight, bias, and AdamW step, exp_avg, exp_avg_sq of each
    adopted = without_torch("manifest", directory)
    assert adopted.returncode == 0, adopted.stderr
    validated = without_torch("validate", directory, "--format", "json")
    report = json.loads(validated.stdout)
    codes = {f["code"] for result in report["results"] for f in result["findings"]}
    assert codes <= {"CKS004", "CKS242"}, validated.stdout
    (directory / "__0_0.distcp").write_bytes(b"")
    audited = without_torch("audit", tmp_path, "--format", "json")
    results = json.loads(audited.stdout)["results"]
    assert [r["checkpoint"] for r in results] == [str(directory)]
    assert "CKS239" in {f["code"] for f in results[0]["findings"]}


def test_safetensors_serialization_is_not_checked_rather_than_corrupt(tmp_path: Path) -> None:
    """`SerializationFormat.SAFETENSORS` stores raw tensor bytes, not torch.save archives: this
    reader says it could not check them instead of calling them damaged."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    directory = tmp_path / "ckpt"
    writer = FileSystemWriter(directory, serialization_format=SerializationFormat.SAFETENSORS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": torch.nn.Linear(3, 2).state_dict()}, storage_writer=writer, no_dist=True)
    codes = _codes(directory)
    assert any("safetensors" in message for message in codes["CKS010"]), codes
    assert "CKS240" not in codes


def _tile(directory: Path, chunks: list[ChunkStorageMetadata], shape: list[int]) -> None:
    def edit(metadata: object) -> None:
        weight = metadata.state_dict_metadata["model.weight"]  # type: ignore[attr-defined]
        weight.size = torch.Size(shape)
        weight.chunks[:] = chunks

    _rewrite(directory, edit)


def test_chunks_stacked_across_each_other_are_refused_before_every_pair_is_compared(saved: Path, tmp_path: Path) -> None:
    """20,000 chunks in a staircase, each open along the sweep while every later one is compared:
    400 million pairs if all were compared."""
    directory = _copy(saved, tmp_path)
    count = 20_000
    stairs = [ChunkStorageMetadata(offsets=torch.Size([i, i]), sizes=torch.Size([count - i, 1])) for i in range(count)]
    _tile(directory, stairs, [count, count])
    codes = _codes(directory)
    assert any("not shown that none overlap" in message for message in codes["CKS237"]), codes


def test_a_large_grid_of_chunks_is_compared_in_full(saved: Path, tmp_path: Path) -> None:
    """512 x 8 chunks, as FSDP across 512 ranks with 8-way tensor parallelism lays a weight out."""
    directory = _copy(saved, tmp_path)
    grid = [ChunkStorageMetadata(offsets=torch.Size([row, column]), sizes=torch.Size([1, 1])) for row in range(512) for column in range(8)]
    grid[-1] = ChunkStorageMetadata(offsets=torch.Size([511, 6]), sizes=torch.Size([1, 2]))  # overlaps its left neighbour
    _tile(directory, grid, [512, 8])
    messages = _codes(directory)["CKS237"]
    assert any("chunks at [511, 6] and [511, 6] overlap" in message for message in messages), messages
    assert not any("not shown" in message for message in messages)
