"""DCP's Hugging Face storage layout written by real ranks (`HuggingFaceStorageWriter`), read as one
checkpoint without torch, and each kind of damage caught naming the rank, the file and the tensor."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader

from ckptspec import validate
from ckptspec.adopt import adopt
from ckptspec._validate import audit
from ckptspec._discover import discover
from ckptspec._views.open import open_view
from ckptspec.formats.hf_storage import open_hf_storage

from ._oracle import chunk_crc32c
from ._torchless import without_torch

pytestmark = pytest.mark.slow

CopyOf = Callable[[Path], Path]
RANK_1 = "shard-00002-model-00001-of-00001.safetensors"


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(f"{finding.file}: {finding.pointer}: {finding.message}")
    return found


def _torch_reads(directory: Path) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    """What torch's own reader makes of the directory: its metadata, and the full tensors it loads."""
    metadata = HuggingFaceStorageReader(str(directory)).read_metadata()
    full = {fqn: torch.zeros(tuple(item.size), dtype=item.properties.dtype) for fqn, item in metadata.state_dict_metadata.items()}
    dcp.load(full, storage_reader=HuggingFaceStorageReader(str(directory)), no_dist=True)
    return metadata.state_dict_metadata, full


def test_tensors_chunks_and_checksums_match_torch(hf_dir: Path) -> None:
    expected, full = _torch_reads(hf_dir)
    layout = open_hf_storage(hf_dir)
    layout.close()
    assert layout.problems == [] and layout.ranks == [0, 1]
    assert {t.fqn: (t.dtype, t.shape) for t in layout.tensors} == {
        fqn: (str(item.properties.dtype).removeprefix("torch."), tuple(item.size)) for fqn, item in expected.items()
    }
    for tensor in layout.tensors:
        assert sorted((c.offsets, c.sizes) for c in tensor.chunks) == sorted(
            (tuple(c.offsets), tuple(c.sizes)) for c in expected[tensor.fqn].chunks
        )
    with open_view(hf_dir) as view:
        assert view.format == "dcp" and view.problems == []
        for tensor in layout.tensors:
            chunks = [(c.offsets, c.sizes) for c in tensor.chunks]
            assert view.tensors[f"/{tensor.fqn}"].crc32c() == chunk_crc32c(full[tensor.fqn], chunks)


def test_inspect_adopt_validate_without_torch(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    shown = without_torch("inspect", "--format", "json", directory)
    assert shown.returncode == 0, shown.stderr
    inspection = json.loads(shown.stdout)
    assert inspection["format"] == "dcp" and inspection["metadata"]["ranks"] == [0, 1]
    assert inspection["metadata"]["chunks"] == {"/embedding": 2, "/head": 2, "/scale": 1}
    assert sorted(inspection["metadata"]["shards"]) == ["shard-00001-model-00001-of-00001.safetensors", RANK_1]
    adopted = without_torch("manifest", directory)
    assert adopted.returncode == 0, adopted.stderr
    checked = without_torch("validate", directory)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    recorded = (directory.parent / f"{directory.name}.ckptspec.yaml").read_text()
    assert "name: embedding" in recorded and "- 32\n      - 32" in recorded


def test_audit_reads_each_directory_as_one_checkpoint(hf_dir: Path, tmp_path: Path) -> None:
    consolidated = hf_dir.with_name(f"{hf_dir.name}-consolidated")
    found = discover([hf_dir, consolidated]).checkpoints
    assert found == [hf_dir, consolidated / "model.safetensors.index.json", consolidated / "sharded"]
    report = audit([hf_dir, consolidated])
    assert {r.checkpoint: r.format for r in report.results} == {str(p): f for p, f in zip(found, ["dcp", "safetensors", "dcp"])}
    with open_view(consolidated / "sharded") as sharded, open_view(consolidated) as whole:
        # Row shards in order are the whole tensor's bytes; column shards are not.
        assert sharded.tensors["/embedding"].crc32c() == whole.tensors["/embedding"].crc32c()
        assert sharded.tensors["/head"].shape == whole.tensors["/head"].shape == (32, 16)


def test_deleted_first_rank_leaves_a_gap(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    (directory / "shard-00001-model-00001-of-00001.safetensors").unlink()
    found = _codes(directory)["CKS237"]
    assert any("/embedding" in line and RANK_1 in line and "gap" in line for line in found), found


def test_deleted_last_rank_is_caught_by_the_manifest(hf_dir: Path, copy_of: CopyOf) -> None:
    """The layout records no global shape and no rank count: without rank 1's file the tensors read as
    smaller ones. The manifest written at adoption records what was there."""
    directory = copy_of(hf_dir)
    adopt(directory)
    (directory / RANK_1).unlink()
    codes = _codes(directory)
    assert any(RANK_1 in line for line in codes["CKS201"]), codes
    assert any("/embedding" in line and "[32, 32] recorded" in line for line in codes["CKS206"]), codes
    assert any("/scale" in line for line in codes["CKS204"]), codes


def test_truncated_shard(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    shard = directory / RANK_1
    shard.write_bytes(shard.read_bytes()[:-100])
    found = _codes(directory)["CKS239"]
    assert any(f"rank 1 file {RANK_1}" in line and "truncated): head, scale cut off" in line for line in found), found


def test_changed_byte_is_caught_by_the_manifest(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    adopt(directory)
    layout = open_hf_storage(directory)
    layout.close()
    chunk = next(t for t in layout.tensors if t.fqn == "head").chunks[-1]
    target = directory / chunk.location.file
    data = bytearray(target.read_bytes())
    data[chunk.location.offset] ^= 0xFF
    target.write_bytes(bytes(data))
    found = _codes(directory)["CKS207"]
    assert any("/head" in line for line in found), found


def _edit_header(file: Path, edit: Callable[[dict[str, object]], None]) -> None:
    """Rewrite a shard's header in place, as a broken writer would have (the data stays where it is)."""
    data = file.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= length
    file.write_bytes(data[:8] + text.ljust(length) + data[8 + length :])


def test_overlapping_chunks(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)

    def overlap(header: dict[str, object]) -> None:
        metadata = header["__metadata__"]
        info = json.loads(metadata["DCP_SHARDING_INFO"])  # type: ignore[index]
        info["embedding"]["saved_offsets"] = [8, 0]  # rows 8..24 now overlap rank 0's rows 0..16
        metadata["DCP_SHARDING_INFO"] = json.dumps(info, separators=(",", ":"))  # type: ignore[index]

    _edit_header(directory / RANK_1, overlap)
    found = _codes(directory)["CKS237"]
    assert any("/embedding" in line and "overlap" in line for line in found), found


def test_unknown_dcp_version_is_not_checked(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    _edit_header(directory / RANK_1, lambda header: header["__metadata__"].update(DCP_VERSION="9.0"))  # type: ignore[attr-defined]
    found = _codes(directory)["CKS010"]
    assert any("9.0" in line and RANK_1 in line for line in found), found


def test_sharding_record_without_a_tensor(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    _edit_header(directory / RANK_1, lambda header: header["__metadata__"].update(DCP_SHARDING_INFO="{}"))  # type: ignore[attr-defined]
    messages = [f.message for f in validate(directory).findings if f.severity == "error"]
    assert any(RANK_1 in m and "saved_offsets" in m for m in messages), messages


def test_shard_that_is_not_safetensors(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    (directory / RANK_1).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    found = _codes(directory)["CKS240"]
    assert any(f"rank 1 file {RANK_1}" in line and "header" in line for line in found), found


def test_shard_that_is_not_a_regular_file(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    (directory / RANK_1).unlink()
    os.mkfifo(directory / RANK_1)
    found = _codes(directory)["CKS238"]
    assert any(f"rank 1 file {RANK_1}" in line and "not a regular file" in line for line in found), found


def test_ranks_disagree_on_a_tensor(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    _edit_header(directory / RANK_1, lambda header: header["embedding"].update(dtype="I32"))  # type: ignore[attr-defined]
    found = _codes(directory)["CKS240"]
    assert any("/embedding" in line and f"rank 1 file {RANK_1}" in line and "int32" in line for line in found), found


def test_a_stray_safetensors_file_is_reported(hf_dir: Path, copy_of: CopyOf) -> None:
    directory = copy_of(hf_dir)
    consolidated = hf_dir.with_name(f"{hf_dir.name}-consolidated")
    (directory / "model-00001-of-00002.safetensors").write_bytes((consolidated / "model-00001-of-00002.safetensors").read_bytes())
    found = _codes(directory)["CKS241"]
    assert any("model-00001-of-00002.safetensors is not named like a shard" in line for line in found), found
