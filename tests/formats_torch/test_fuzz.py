"""Any single damaged byte of a real legacy torch, safetensors or TorchScript file gives a
`CkptspecError` or a clean read, never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError
from ckptspec._views.open import open_view
from ckptspec.formats.inspect import inspect_checkpoint

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read_everything(path: Path) -> None:
    inspect_checkpoint(path)
    with open_view(path) as view:
        for tensor in view.tensors.values():
            tensor.crc32c()


def _damaged_copy(original: Path, target: Path, position: float, value: int) -> Path:
    data = bytearray(original.read_bytes())
    # Half the draws land in the first KiB, where the pickles and headers that give structure are.
    index = int(position * len(data)) if value % 2 else int(position * min(len(data), 1024))
    data[index] = value
    target.write_bytes(bytes(data))
    return target


def _survives(original: Path, target: Path, position: float, value: int) -> None:
    try:
        _read_everything(_damaged_copy(original, target, position, value))
    except CkptspecError:
        pass


@FUZZ
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_legacy_torch(legacy_corpus: dict[str, Path], tmp_path: Path, position: float, value: int) -> None:
    _survives(legacy_corpus["lightning.ckpt"], tmp_path / "damaged.ckpt", position, value)


@FUZZ
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_safetensors(safetensors_corpus: dict[str, Path], tmp_path: Path, position: float, value: int) -> None:
    _survives(safetensors_corpus["model.safetensors"], tmp_path / "damaged.safetensors", position, value)


@FUZZ
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_torchscript(torchscript_corpus: dict[str, Path], tmp_path: Path, position: float, value: int) -> None:
    original = torchscript_corpus["traced.pt"]
    data = original.read_bytes()
    # The other half of the draws hit the zip directory at the end instead of the first KiB.
    tail = len(data) - 1 - int(position * min(len(data), 4096))
    target = tmp_path / "damaged.pt"
    if value % 2:
        _survives(original, target, position, value)
    else:
        damaged = bytearray(data)
        damaged[tail] = value
        target.write_bytes(bytes(damaged))
        try:
            _read_everything(target)
        except CkptspecError:
            pass


@pytest.mark.parametrize("size", [0, 1, 8, 9])
def test_tiny_safetensors_like_files(tmp_path: Path, size: int) -> None:
    path = tmp_path / "tiny.safetensors"
    path.write_bytes((b"\x01" + b"\x00" * 7 + b"{")[:size])
    with pytest.raises(CkptspecError, match="tiny.safetensors"):
        _read_everything(path)


def test_the_readers_import_neither_torch_numpy_nor_pydantic() -> None:
    import subprocess
    import sys

    script = (
        "import sys, ckptspec.formats.legacy_torch, ckptspec.formats.safetensors, ckptspec.formats.torchscript\n"
        "print(sorted(m for m in ('torch', 'numpy', 'pydantic', 'safetensors') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
