"""Any single damaged byte of a real checkpoint gives a `CkptspecError` or a clean read, never
another exception (which the command line would report as an internal error)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.torchzip import open_torch_checkpoint


def _read_everything(path: Path) -> None:
    inspect_checkpoint(path)
    with open_torch_checkpoint(path) as checkpoint:
        checkpoint.verify()
        for _, tensor in checkpoint.tensors():
            tensor.crc32c()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_one_damaged_byte_never_escapes_as_another_error(
    lightning_corpus: dict[str, Path], tmp_path: Path, position: float, value: int
) -> None:
    original = lightning_corpus["last.ckpt"].read_bytes()
    damaged = bytearray(original)
    # Half the draws land in the zip directory at the end, where one byte changes the most structure.
    index = int(position * len(damaged)) if value % 2 else len(damaged) - 1 - int(position * min(len(damaged), 4096))
    damaged[index] = value
    path = tmp_path / "damaged.ckpt"
    path.write_bytes(bytes(damaged))
    try:
        _read_everything(path)
    except CkptspecError:
        pass


def test_an_impossible_zip_version_is_ignored_as_torch_ignores_it(lightning_corpus: dict[str, Path], tmp_path: Path) -> None:
    import torch

    data = bytearray(lightning_corpus["last.ckpt"].read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 6 : central + 8] = (117).to_bytes(2, "little")  # "version needed to extract": 11.7
    path = tmp_path / "future.ckpt"
    path.write_bytes(bytes(data))
    loaded = torch.load(path, weights_only=False)
    with open_torch_checkpoint(path) as checkpoint:
        assert checkpoint.resolve("/global_step") == loaded["global_step"]
        assert checkpoint.verify() == []
