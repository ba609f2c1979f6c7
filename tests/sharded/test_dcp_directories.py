"""DCP directories written by real ranks, read, adopted, validated and audited by ckptspec, and each
kind of damage caught naming the rank, the file and the tensor."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from ckptspec import validate
from ckptspec.adopt import adopt
from ckptspec._validate import audit
from ckptspec._discover import discover
from ckptspec._views.open import open_view
from ckptspec.formats.dcp import open_dcp_directory
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.torchzip import TorchCheckpoint

from ._oracle import chunk_crc32c

pytestmark = pytest.mark.slow

CopyOf = Callable[[Path], Path]
SHARD_CODES = {"CKS236", "CKS237", "CKS238", "CKS239", "CKS240", "CKS241", "CKS209", "CKS211", "CKS010"}


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(f"{finding.file}: {finding.pointer}: {finding.message}")
    return found


def _full_tensors(directory: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    """The state dict as torch itself reassembles it from the directory."""
    dcp_to_torch_save(directory, tmp_path / "full.pt")
    flat: dict[str, torch.Tensor] = {}

    def collect(prefix: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            flat[prefix] = value
        elif isinstance(value, dict):
            for key, child in value.items():
                collect(f"{prefix}/{key}", child)

    collect("", torch.load(tmp_path / "full.pt", weights_only=False))
    return flat


@pytest.mark.parametrize("fixture", ["fsdp_dir", "rows_dir"])
def test_every_tensor_chunk_and_checksum_matches_torch(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    directory = request.getfixturevalue(fixture)
    full = _full_tensors(directory, tmp_path)
    layout = open_dcp_directory(directory)
    with open_view(directory) as view:
        assert view.problems == [] or {p.kind for p in view.problems} == {"optimizer-keyed-by-index"}
        assert set(view.tensors) == set(full)
        for tensor in layout.tensors:
            pointer = "/" + "/".join(map(str, tensor.path))
            info = view.tensors[pointer]
            assert (info.dtype, info.shape) == (str(full[pointer].dtype).removeprefix("torch."), tuple(full[pointer].shape))
            assert info.crc32c() == chunk_crc32c(full[pointer], [(c.offsets, c.sizes) for c in tensor.chunks])


def test_inspect_shows_ranks_and_shards(fsdp_dir: Path, rows_dir: Path) -> None:
    fsdp = inspect_checkpoint(fsdp_dir)
    assert fsdp.format == "dcp" and fsdp.metadata["ranks"] == [0, 1]
    assert fsdp.metadata["chunks"]["/model/0.weight"] == 2
    assert {c.name for c in fsdp.component_summaries()} == {"model", "optimizer"}
    rows = inspect_checkpoint(rows_dir)
    assert rows.metadata["ranks"] == [0, 1, 2, 3]
    assert sorted(rows.metadata["shards"]) == [f"__{rank}_0.distcp" for rank in range(4)]
    assert rows.metadata["chunks"] == {"/model/embedding": 4, "/model/head": 4, "/model/scale": 1}


def test_per_rank_metadata_is_one_checkpoint(rows_dir: Path) -> None:
    per_rank = rows_dir.with_name(f"{rows_dir.name}-per-rank")
    assert sorted(p.name for p in per_rank.glob("*.metadata")) == [f"__{rank}.metadata" for rank in range(4)]
    collective, separate = open_dcp_directory(rows_dir), open_dcp_directory(per_rank)
    assert separate.problems == []
    assert {t.fqn: sorted(c.offsets for c in t.chunks) for t in separate.tensors} == {
        t.fqn: sorted(c.offsets for c in t.chunks) for t in collective.tensors
    }


def test_adopt_then_validate_and_audit_as_one_checkpoint(fsdp_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(fsdp_dir)
    manifest = adopt(directory)
    assert manifest == directory.with_name(f"{directory.name}.ckptspec.yaml")
    codes = _codes(directory)
    assert not SHARD_CODES & set(codes), codes
    assert set(codes) <= {"CKS004", "CKS242"}, codes
    assert discover([directory.parent]).checkpoints == [directory]
    report = audit([directory.parent])
    assert [r.checkpoint for r in report.results] == [str(directory)]


def test_manifest_catches_a_changed_chunk(fsdp_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(fsdp_dir)
    adopt(directory)
    layout = open_dcp_directory(directory)
    chunk = next(t for t in layout.tensors if t.fqn == "model.2.weight").chunks[-1]
    target = directory / chunk.location.file
    with TorchCheckpoint(target, chunk.location.offset, chunk.location.offset + chunk.location.length) as piece:
        start, _ = piece.tree.byte_range
    data = bytearray(target.read_bytes())
    data[start] ^= 0xFF
    target.write_bytes(bytes(data))
    codes = _codes(directory)
    assert any("/model/2.weight" in line for line in codes["CKS207"]), codes
    (directory.parent / f"{directory.name}.ckptspec.yaml").unlink()
    without_manifest = _codes(directory)  # then the slice's own zip CRC-32 catches it
    assert any("/model/2.weight" in line and "rank 1" in line for line in without_manifest["CKS209"]), without_manifest


def test_deleted_shard_names_rank_file_and_tensor(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    (directory / "__2_0.distcp").unlink()
    found = _codes(directory)["CKS238"]
    assert any("rank 2 file __2_0.distcp" in line and "/model/embedding" in line for line in found), found


def test_truncated_slice(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    shard = directory / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-100])
    found = _codes(directory)["CKS239"]
    assert any("rank 1 file __1_0.distcp" in line and "truncated" in line for line in found), found


def test_missing_metadata_is_an_uncommitted_save(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    (directory / ".metadata").rename(directory / ".metadata.tmp")
    found = _codes(directory)["CKS236"]
    assert any("never committed" in line and "[0, 1, 2, 3]" in line for line in found), found
    assert discover([directory.parent]).checkpoints == [directory]


def test_per_rank_save_missing_one_rank_metadata(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir.with_name(f"{rows_dir.name}-per-rank"))
    (directory / "__3.metadata").unlink()
    found = _codes(directory)["CKS236"]
    assert any("rank 3" in line for line in found), found


def _edit_metadata(directory: Path, edit: Callable[[object], None]) -> None:
    """Change the real metadata with torch's own classes, as a broken planner would have written it."""
    with (directory / ".metadata").open("rb") as handle:
        metadata = pickle.load(handle)
    edit(metadata)
    with (directory / ".metadata").open("wb") as handle:
        pickle.dump(metadata, handle)


def test_overlapping_chunks(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)

    def overlap(metadata: object) -> None:
        chunks = metadata.state_dict_metadata["model.embedding"].chunks  # type: ignore[attr-defined]
        chunks[1].offsets = torch.Size([8, 0])  # rows 8..24 now overlap rank 0's rows 0..16

    _edit_metadata(directory, overlap)
    found = _codes(directory)["CKS237"]
    assert any("/model/embedding" in line and "overlap" in line for line in found), found


def test_gap_in_chunks(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    _edit_metadata(directory, lambda m: m.state_dict_metadata["model.head"].chunks.pop())  # type: ignore[attr-defined]
    found = _codes(directory)["CKS237"]
    assert any("/model/head" in line and "gap" in line for line in found), found


def test_unknown_metadata_version_is_not_checked(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    _edit_metadata(directory, lambda m: setattr(m, "version", "9.0.0"))
    found = _codes(directory)["CKS010"]
    assert any("9.0.0" in line for line in found), found


def test_stray_shard_of_another_save(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)
    (directory / "__7_0.distcp").write_bytes((directory / "__0_0.distcp").read_bytes())
    assert any("__7_0.distcp" in line for line in _codes(directory)["CKS241"])


def test_slice_swapped_between_tensors(rows_dir: Path, copy_of: CopyOf) -> None:
    """Storage entries pointing at another tensor's slice: the slice holds the wrong shape."""
    directory = copy_of(rows_dir)

    def swap(metadata: object) -> None:
        storage = metadata.storage_data  # type: ignore[attr-defined]
        embedding = next(k for k in storage if k.fqn == "model.embedding" and list(k.offset) == [0, 0])
        head = next(k for k in storage if k.fqn == "model.head" and list(k.offset) == [0, 0])
        storage[embedding], storage[head] = storage[head], storage[embedding]

    _edit_metadata(directory, swap)
    found = _codes(directory)["CKS240"]
    assert any("/model/embedding" in line and "shape" in line for line in found), found


def test_lightning_sharded_directory_reads_as_its_lightning_checkpoint(lightning_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(lightning_dir)
    with open_view(directory) as view:
        assert view.format == "lightning"
        assert "/state_dict/0.weight" in view.tensors and "/optimizer_states/0/state/0/exp_avg" in view.tensors
        assert view.resolve("/global_step") == 4 and isinstance(view.resolve("/loops"), dict)  # 16 samples, batches of 4
        assert view.fit_progress() is not None
    adopt(directory)
    codes = _codes(directory)
    assert not SHARD_CODES & set(codes), codes
    (directory / "__0_0.distcp").unlink()
    assert any("rank 0 file __0_0.distcp" in line for line in _codes(directory)["CKS238"])


def test_per_rank_metadata_that_disagree(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir.with_name(f"{rows_dir.name}-per-rank"))
    with (directory / "__1.metadata").open("rb") as handle:
        metadata = pickle.load(handle)
    metadata.state_dict_metadata["model.embedding"].size = torch.Size([4, 32])
    with (directory / "__1.metadata").open("wb") as handle:
        pickle.dump(metadata, handle)
    found = _codes(directory)["CKS211"]
    assert any("model.embedding: the ranks' metadata disagree" in line for line in found), found


def test_column_sharded_overlap(rows_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(rows_dir)

    def overlap(metadata: object) -> None:
        chunks = metadata.state_dict_metadata["model.head"].chunks  # type: ignore[attr-defined]
        chunks[2].offsets = torch.Size([0, 12])  # columns 12..20 now overlap rank 1's 8..16

    _edit_metadata(directory, overlap)
    found = _codes(directory)["CKS237"]
    assert any("/model/head" in line and "overlap" in line for line in found), found
