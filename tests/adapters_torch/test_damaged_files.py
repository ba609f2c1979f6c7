"""Loading, restoring and resuming from a damaged checkpoint file: ckptspec's error naming the file
and what is wrong, never the error torch's zip reader or unpickler happened to raise."""

from __future__ import annotations

import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import CorruptCheckpointError, ReaderError, UnsupportedFormatError, manifest_path_for  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

from ._tiny import Net, seed_everything  # noqa: E402

def _pickle_offset(data: bytes, path: Path) -> int:
    """Where the bytes of the archive's data.pkl start."""
    with zipfile.ZipFile(path) as archive:
        record = next(info for info in archive.infolist() if info.filename.endswith("/data.pkl"))
    name_length, extra_length = struct.unpack_from("<HH", data, record.header_offset + 26)
    return record.header_offset + 30 + name_length + extra_length


def _flipped(data: bytes, offset: int) -> bytes:
    damaged = bytearray(data)
    damaged[offset] ^= 0xFF
    return bytes(damaged)


DAMAGES: dict[str, tuple[Callable[[bytes, Path], bytes], type[ReaderError], str]] = {
    "cut in half": (lambda data, path: data[: len(data) // 2], CorruptCheckpointError, r"truncated"),
    "end record cut off": (lambda data, path: data[:-22], CorruptCheckpointError, r"truncated"),
    "empty": (lambda data, path: b"", CorruptCheckpointError, r"empty file"),
    "not a zip": (lambda data, path: b"epoch,loss\n1,0.5\n" * 8, UnsupportedFormatError, r"not a checkpoint ckptspec reads"),
    "pickle opcode flipped": (
        lambda data, path: _flipped(data, _pickle_offset(data, path)), CorruptCheckpointError, r"data\.pkl .*damaged"
    ),
}


def _damaged_copies(source: Path, root: Path) -> dict[str, Path]:
    """One copy of `source` per damage, each in its own directory with the source's manifest beside it."""
    data = source.read_bytes()
    copies = {}
    for label, (damage, _, _) in DAMAGES.items():
        target = root / label.replace(" ", "-") / source.name
        target.parent.mkdir(parents=True)
        target.write_bytes(damage(data, source))
        shutil.copy(manifest_path_for(source), manifest_path_for(target))
        copies[label] = target
    return copies


@pytest.fixture(scope="session")
def torch_damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged-torch")
    seed_everything(0)
    model = Net()
    checkpoint = root / "sound" / "model.pt"
    checkpoint.parent.mkdir()
    ckpt.save(checkpoint, model=model, optimizer=torch.optim.Adam(model.parameters()))
    return _damaged_copies(checkpoint, root)


class TinyModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.cross_entropy(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters())

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)))
        return torch.utils.data.DataLoader(data, batch_size=4)


def _trainer(root: Path, **options: object) -> pl.Trainer:
    return pl.Trainer(default_root_dir=root, max_epochs=1, callbacks=[CkptspecCallback()], accelerator="cpu", devices=1,
                      logger=False, enable_progress_bar=False, enable_model_summary=False, **options)  # fmt: skip


@pytest.fixture(scope="session")
def lightning_damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged-lightning")
    seed_everything(0)
    trainer = _trainer(root / "sound")
    trainer.fit(TinyModule())
    (checkpoint,) = (root / "sound").rglob("*.ckpt")
    return _damaged_copies(checkpoint, root)


@pytest.mark.parametrize("damage", DAMAGES)
def test_load_and_restore_name_the_file_and_the_damage(torch_damaged: dict[str, Path], damage: str) -> None:
    path = torch_damaged[damage]
    _, error, expected = DAMAGES[damage]
    with pytest.raises(error, match=rf"^{path}: .*{expected}"):
        ckpt.load(path)
    model = Net()
    with pytest.raises(error, match=rf"^{path}: .*{expected}"):
        ckpt.restore(path, model=model, optimizer=torch.optim.Adam(model.parameters()))


@pytest.mark.parametrize("damage", ["cut in half", "not a zip", "pickle opcode flipped"])
def test_resuming_a_damaged_file_names_it(lightning_damaged: dict[str, Path], damage: str, tmp_path: Path) -> None:
    path = lightning_damaged[damage]
    _, error, expected = DAMAGES[damage]
    with pytest.raises(error, match=rf"^{path}: .*{expected}"):
        _trainer(tmp_path, enable_checkpointing=False).fit(TinyModule(), ckpt_path=path)


def test_flipped_tensor_bytes_load_but_the_restore_refuses_them(tmp_path: Path) -> None:
    """torch.load does not check record CRCs: the manifest's tensor CRC32Cs are what catch this."""
    model = Net()
    path = tmp_path / "model.pt"
    ckpt.save(path, model=model)
    data = path.read_bytes()
    weight = model.features.weight.detach().numpy().tobytes()
    path.write_bytes(_flipped(data, data.index(weight) + 5))
    with pytest.raises(ckpt.RestoreError, match=r"CRC32C.*features\.weight"):
        ckpt.restore(path, model=Net())

