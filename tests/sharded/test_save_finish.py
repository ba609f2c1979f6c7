"""What a sharded save reads back: the ranks no data file when every tensor is written from its own
memory (contiguous CPU tensors), rank 0 none when the ranks passed on everything else (digests,
and the plain values of the non-tensor items), nor the `.metadata` it committed; the manifest is
the one adoption builds by reading every file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
import torch.distributed as dist

from ckptspec._documents import load_manifest
from ckptspec.adapters._spec import as_spec
from ckptspec.adapters._torch_distributed import _InventoryWriter
from ckptspec.adopt import build_manifest

pytestmark = pytest.mark.slow

_opened: list[str] | None = None
"""Paths opened for reading while a test records them (the audit hook below cannot be removed, only idle)."""


def _record_opens(event: str, arguments: tuple[Any, ...]) -> None:
    if _opened is not None and event == "open" and isinstance(arguments[0], (str, Path)):
        path, _, flags = arguments
        if not flags & (os.O_WRONLY | os.O_RDWR):
            _opened.append(str(path))


sys.addaudithook(_record_opens)


@contextmanager
def _recording(opened: list[str]) -> Iterator[None]:
    global _opened
    _opened = opened
    try:
        yield
    finally:
        _opened = None


@pytest.fixture
def opened_in_finish(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files opened for reading during rank 0's `finish` (the commit of `.metadata`, then the manifest)."""
    opened: list[str] = []
    original = _InventoryWriter.finish

    def recording(self: _InventoryWriter, *args: Any, **kwargs: Any) -> None:
        with _recording(opened):
            original(self, *args, **kwargs)

    monkeypatch.setattr(_InventoryWriter, "finish", recording)
    return opened


def _save_alone(directory: Path, state: dict[str, Any]) -> Path:
    """`save_sharded` by a process group of one rank, in this process."""
    import ckptspec.torch as ckpt

    dist.init_process_group("gloo", init_method=f"file://{directory.parent}/store", rank=0, world_size=1)
    try:
        return ckpt.save_sharded(directory, state)
    finally:
        dist.destroy_process_group()


def _model() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return {"weight": torch.randn(32, 16, generator=generator), "bias": torch.randn(32, generator=generator)}


def test_rank_zero_opens_no_data_file_when_every_value_is_passed(tmp_path: Path, opened_in_finish: list[str]) -> None:
    state = {"model": _model(), "epoch": 3, "run": "baseline", "lr": 0.125, "resumed": False, "note": None}
    manifest = load_manifest(_save_alone(tmp_path / "ckpt", state))
    assert [path for path in opened_in_finish if path.startswith(str(tmp_path / "ckpt"))] == []
    assert manifest == build_manifest(tmp_path / "ckpt")


def test_the_metadata_held_is_the_one_read_from_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What rank 0 builds the manifest from, DCP's `Metadata` as it committed it, equals
    `.metadata` read back torch-free: tensors of several dtypes, one saved under two names, a
    strided view, and non-tensor values of every kind."""
    from ckptspec.adapters import _torch_distributed
    from ckptspec.formats._dcp_metadata import parse_metadata, unpickle_metadata

    held: list[Any] = []
    original = _torch_distributed._committed
    monkeypatch.setattr(_torch_distributed, "_committed", lambda metadata: held.append(original(metadata)) or held[-1])
    weight = torch.randn(8, 4)
    model = {"weight": weight, "tied": weight, "half": torch.randn(3).to(torch.bfloat16), "steps": torch.arange(5),
             "transposed": torch.randn(4, 2).t()}  # fmt: skip
    optimizer = {"param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0, 1]}]}
    _save_alone(tmp_path / "ckpt", {"model": model, "optimizer": optimizer, "epoch": 3, "step": numpy.int64(12)})
    metadata = tmp_path / "ckpt" / ".metadata"
    assert held == [parse_metadata(unpickle_metadata(metadata.read_bytes(), metadata)[0], metadata)]


def test_no_rank_reads_a_data_file_back(tmp_path: Path) -> None:
    """Contiguous tensors, each filling its storage: every chunk's CRC32C comes from the buffer
    written from its memory; nothing of the save is read back, by the rank or by rank 0."""
    state = {"model": _model(), "epoch": 3}
    opened: list[str] = []
    with _recording(opened):
        manifest = load_manifest(_save_alone(tmp_path / "ckpt", state))
    assert [path for path in opened if path.endswith(".distcp")] == []
    assert manifest == build_manifest(tmp_path / "ckpt")


def test_values_of_other_types_are_read_from_their_slices(tmp_path: Path, opened_in_finish: list[str]) -> None:
    """A tuple, a NumPy scalar and a long string are not passed on: the restricted unpickler's
    reading of them is what the manifest records, as adoption would."""
    state = {"model": _model(), "betas": (0.9, 0.999), "step": numpy.int64(12), "notes": "x" * 10_000, "epoch": 3}
    manifest = load_manifest(_save_alone(tmp_path / "ckpt", state))
    assert len([path for path in opened_in_finish if path.endswith(".distcp")]) == 3
    assert not [path for path in opened_in_finish if path.endswith(".metadata")]
    assert manifest == build_manifest(tmp_path / "ckpt")


@pytest.mark.parametrize("suffix", ["", "-crc32c"])
def test_two_ranks_manifest_is_the_one_read_back(fsdp_dir: Path, suffix: str) -> None:
    """The manifests of the 2-rank saves (a model sharded by FSDP2, each rank's generators beside
    it) equal those adoption builds from the files."""
    directory = fsdp_dir.with_name(f"{fsdp_dir.name}-adapter{suffix}")
    spec = as_spec(Path(f"{fsdp_dir}-adapter.rank0.spec.yaml")) if suffix else None
    saved = load_manifest(directory.with_name(f"{directory.name}.ckptspec.yaml"))
    assert all(tensor.crc32c for tensor in saved.components.model.tensors)  # type: ignore[union-attr]
    assert saved == build_manifest(directory, spec)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_metadata_the_reader_cannot_take_as_held_is_read_from_the_file(tmp_path: Path, opened_in_finish: list[str]) -> None:
    """A dtype the reader does not know (complex32) in the committed metadata: rank 0 reads and
    judges `.metadata` itself, as adoption would, rather than vouching for what it holds."""
    manifest = load_manifest(_save_alone(tmp_path / "ckpt", {"model": {"weight": torch.randn(4).to(torch.complex32)}}))
    assert any(path.endswith(".metadata") for path in opened_in_finish)
    assert manifest == build_manifest(tmp_path / "ckpt")
