"""`ckptspec.torch.async_save_sharded` on 2 real ranks, and what every sharded save digests as it
writes: the manifest is the marker of a finished save, a failed save leaves none, and the digests
taken on the way to the files are those of the bytes on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ckptspec import validate
from ckptspec._documents import load_manifest
from ckptspec.adopt import build_manifest
from ckptspec.formats.dcp import open_dcp_directory
from ckptspec.formats.torchzip import TorchCheckpoint
from ckptspec.formats._tensors import TensorRef

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def async_saves(fsdp_dir: Path) -> tuple[Path, list[dict]]:
    """The async saves the two ranks that wrote `fsdp_dir` made beside it."""
    directory = fsdp_dir.with_name(f"{fsdp_dir.name}-async")
    return directory, [json.loads(Path(f"{directory}.rank{rank}.json").read_text()) for rank in range(2)]


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(f"{finding.file}: {finding.pointer}: {finding.message}")
    return found


def test_the_future_resolves_once_the_manifest_is_written(async_saves: tuple[Path, list[dict]]) -> None:
    directory, ranks = async_saves
    for result in ranks:
        assert result["manifest"] == f"{directory}.ckptspec.yaml"
        assert result["marked_when_resolved"] is True
    assert set(_codes(directory)) <= {"CKS004", "CKS242"}


def test_each_rank_gets_its_own_generators_back(async_saves: tuple[Path, list[dict]]) -> None:
    _, ranks = async_saves
    for result in ranks:
        assert result["after_restore"] == result["after_save"]
        assert result["report"] == [2, 2, True]
        assert result["weights"][1] == pytest.approx(result["weights"][0])
    assert ranks[0]["after_restore"] != ranks[1]["after_restore"]


def test_a_failed_save_leaves_no_manifest_and_nothing_behind(async_saves: tuple[Path, list[dict]]) -> None:
    """Rank 1 cannot write its data file: the future raises on both ranks, and what the ranks
    wrote into the staging directory goes with it."""
    directory, ranks = async_saves
    failed = Path(f"{directory}-failed")
    for result in ranks:
        assert "File too large" in result["errors"][str(failed)], result["errors"]
    assert not Path(f"{failed}.ckptspec.yaml").exists() and not any(failed.iterdir())
    assert not [path.name for path in failed.parent.iterdir() if path.name.startswith(f".{failed.name}.")]


def test_a_failed_save_over_a_finished_one_keeps_it_with_its_manifest(async_saves: tuple[Path, list[dict]]) -> None:
    """The ranks write into a staging directory: the finished save at the same path is never
    touched, and still validates with its manifest."""
    directory, ranks = async_saves
    overwritten = Path(f"{directory}-overwritten")
    for result in ranks:
        assert "File too large" in result["errors"][str(overwritten)], result["errors"]
    assert Path(f"{overwritten}.ckptspec.yaml").is_file()
    assert validate(overwritten).passed, [finding.message for finding in validate(overwritten).errors]


def test_a_changed_byte_names_the_rank_file_and_tensor(async_saves: tuple[Path, list[dict]], tmp_path: Path) -> None:
    """One bit of rank 1's chunk of a tensor changed: the file digest rank 1 took while writing
    names its file, the tensor CRC32C rank 0 combined from both ranks' chunks names the tensor, and
    the file its changed chunk is in (that chunk's record fails its CRC-32)."""
    source = async_saves[0]
    directory = Path(shutil.copytree(source, tmp_path / source.name))
    shutil.copy2(f"{source}.ckptspec.yaml", f"{directory}.ckptspec.yaml")
    chunk = next(t for t in open_dcp_directory(directory).tensors if t.fqn == "model.2.weight").chunks[-1]
    target = directory / chunk.location.file
    assert target.name == "__1_0.distcp"
    with TorchCheckpoint(target, chunk.location.offset, chunk.location.offset + chunk.location.length) as piece:
        start, _ = piece.tree.byte_range
    data = bytearray(target.read_bytes())
    data[start] ^= 0x01
    target.write_bytes(bytes(data))
    found = _codes(directory)
    assert [line for line in found["CKS203"] if "__1_0.distcp" in line] == found["CKS203"] != [], found
    [mismatch] = found["CKS207"]
    assert mismatch.startswith(f"{target}: /model/2.weight: /model/2.weight: crc32c ") and "changed: rank 1 file __1_0.distcp bytes" in mismatch, found


def test_a_chunk_saved_again_names_the_directory(async_saves: tuple[Path, list[dict]], tmp_path: Path) -> None:
    """Rank 1's chunk of a tensor replaced by a sound archive of other values: no record fails its
    own CRC-32, so the tensor's CRC32C mismatch names the directory, not a file it cannot tell."""
    import io

    source = async_saves[0]
    directory = Path(shutil.copytree(source, tmp_path / source.name))
    shutil.copy2(f"{source}.ckptspec.yaml", f"{directory}.ckptspec.yaml")
    chunk = next(t for t in open_dcp_directory(directory).tensors if t.fqn == "model.2.weight").chunks[-1]
    location = chunk.location
    buffer = io.BytesIO()
    torch.save(torch.full(tuple(chunk.sizes), 0.25), buffer)
    assert len(buffer.getvalue()) == location.length
    target = directory / location.file
    data = bytearray(target.read_bytes())
    data[location.offset : location.offset + location.length] = buffer.getvalue()
    target.write_bytes(bytes(data))
    found = _codes(directory)
    [mismatch] = found["CKS207"]
    assert mismatch.startswith(f"{directory}: /model/2.weight: /model/2.weight: crc32c "), found
    assert mismatch.endswith("; its parts lie in several files and none fails a checksum of its own"), found


def test_digests_taken_while_writing_are_those_of_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rank saves a row-major tensor (twice, under a second name), a vector, a transposed view
    and rows of a larger tensor (which DCP copies before writing): the manifest's digests equal
    those read back from the files, and only the transposed view's bytes were read during the save
    (a strided tensor's CRC32C is over its elements in row-major order, not its storage's)."""
    import ckptspec.torch as ckpt

    read: list[tuple[int, ...]] = []
    original = TensorRef.crc32c

    def recording(self: TensorRef, value: int = 0) -> int:
        read.append(self.shape)
        return original(self, value)

    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(64, 32, generator=generator)
    model = {"weight": weight, "tied": weight, "bias": torch.randn(64, generator=generator),
             "transposed": torch.randn(16, 8, generator=generator).t(), "rows": torch.randn(32, 8, generator=generator)[8:24]}  # fmt: skip
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        monkeypatch.setattr(TensorRef, "crc32c", recording)
        manifest_path = ckpt.save_sharded(tmp_path / "ckpt", {"model": model})
        monkeypatch.undo()
    finally:
        dist.destroy_process_group()
    assert read == [(8, 16)]
    saved = load_manifest(manifest_path)
    reread = build_manifest(tmp_path / "ckpt")
    assert saved.files == reread.files
    assert saved.components.model.tensors == reread.components.model.tensors  # type: ignore[union-attr]
    assert {tensor.name for tensor in saved.components.model.tensors} >= {"weight", "tied", "bias", "transposed", "rows"}  # type: ignore[union-attr]


@pytest.mark.parametrize("function", ["save_sharded", "async_save_sharded"])
def test_a_url_is_refused_before_anything_is_written(function: str) -> None:
    import ckptspec.torch as ckpt
    from ckptspec import AdapterError

    with pytest.raises(AdapterError, match="s3://bucket/run: sharded saves go to a local directory"):
        getattr(ckpt, function)("s3://bucket/run", {"model": {"weight": torch.zeros(2)}})
