"""Damaged and unsupported files: one clear error each, naming the file and the problem."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import AmbiguousArchiveError, CorruptCheckpointError, UnsupportedFormatError
from ckptspec.cli import cli
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.torchzip import open_torch_checkpoint
from ckptspec.formats._tensors import extent_problems

torch = pytest.importorskip("torch")

from ._torch_corpus import rewrite_archive  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("good") / "good.pt"
    torch.save({"w": torch.arange(64, dtype=torch.float32), "b": torch.ones(3)}, path)
    return path


def _expect(path: Path, error: type[Exception], *phrases: str) -> None:
    for read in (open_torch_checkpoint, inspect_checkpoint):
        with pytest.raises(error) as caught:
            read(path)
        message = str(caught.value)
        assert message.startswith(str(path)), message
        assert all(phrase in message for phrase in phrases), message


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.pt").write_bytes(b"")
    _expect(tmp_path / "empty.pt", CorruptCheckpointError, "empty file")


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_truncated_file(good: Path, tmp_path: Path, keep: float) -> None:
    data = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: int(len(data) * keep)])
    _expect(tmp_path / "cut.pt", CorruptCheckpointError, "bad zip directory", "truncated")


def test_bad_zip_directory(good: Path, tmp_path: Path) -> None:
    data = bytearray(good.read_bytes())
    directory = data.index(b"PK\x01\x02")
    data[directory : directory + 4] = b"XXXX"
    (tmp_path / "bad.pt").write_bytes(bytes(data))
    _expect(tmp_path / "bad.pt", CorruptCheckpointError, "bad zip directory")


def test_missing_storage_record(good: Path, tmp_path: Path) -> None:
    path = rewrite_archive(good, tmp_path / "missing.pt", drop=("data/1",))
    _expect(path, CorruptCheckpointError, "missing record", "data/1")


def test_record_shorter_than_its_storage(good: Path, tmp_path: Path) -> None:
    path = rewrite_archive(good, tmp_path / "short.pt", replace={"data/0": b"\x00" * 10})
    with open_torch_checkpoint(path) as checkpoint:
        (problem,) = extent_problems(checkpoint.path, checkpoint.tensors())
        assert problem.pointer == "/w"
        assert problem.message == "storage 0 claims 64 × float32 = 256 bytes, but its record good/data/0 holds 10"
        with pytest.raises(CorruptCheckpointError, match="holds 10$"):
            checkpoint.resolve("/w").crc32c()
        assert checkpoint.resolve("/b").crc32c() == checkpoint.resolve("/b").crc32c()


def test_inspect_refuses_a_record_shorter_than_its_storage_in_one_line(good: Path, tmp_path: Path) -> None:
    path = rewrite_archive(good, tmp_path / "short.pt", replace={"data/0": b"\x00" * 10})
    result = CliRunner().invoke(cli, ["inspect", "--format", "json", str(path)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: {path}: tensor /w: storage 0 claims 64 × float32 = 256 bytes, but its record good/data/0 holds 10\n"
    )


def test_compressed_record(good: Path, tmp_path: Path) -> None:
    path = rewrite_archive(good, tmp_path / "deflated.pt", compress=("data/0",))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo("good/data/0").compress_type == zipfile.ZIP_DEFLATED
    _expect(path, AmbiguousArchiveError, "ambiguous zip archive", "good/data/0", "compressed")


def test_unreadable_pickle(good: Path, tmp_path: Path) -> None:
    path = rewrite_archive(good, tmp_path / "garbage.pt", replace={"data.pkl": b"\x80\x02}q\x00(X"})
    _expect(path, CorruptCheckpointError, "data.pkl cannot be read")


def test_legacy_format_is_not_a_zip_archive(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(UnsupportedFormatError, match="legacy.pt: a legacy \\(pre-1.6\\) torch.save file, not a torch.save archive"):
        open_torch_checkpoint(tmp_path / "legacy.pt")
    assert inspect_checkpoint(tmp_path / "legacy.pt").metadata["serialization"] == "legacy"


def test_torchscript_archive_is_not_a_torch_save_archive(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "scripted.pt")
    with pytest.raises(UnsupportedFormatError, match="scripted.pt: a TorchScript archive"):
        open_torch_checkpoint(tmp_path / "scripted.pt")
    assert inspect_checkpoint(tmp_path / "scripted.pt").format == "torchscript"


def test_dcp_directory(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.ones(4)}, checkpoint_id=tmp_path / "dcp", no_dist=True)
    with pytest.raises(UnsupportedFormatError, match="a directory, not a torch.save file"):
        open_torch_checkpoint(tmp_path / "dcp")
    assert inspect_checkpoint(tmp_path / "dcp").format == "dcp"


def test_import_pulls_in_neither_torch_nor_numpy() -> None:
    script = (
        "import sys, ckptspec.formats.torchzip, ckptspec.formats.lightning\n"
        "print(sorted(m for m in ('torch', 'numpy', 'pytorch_lightning') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
