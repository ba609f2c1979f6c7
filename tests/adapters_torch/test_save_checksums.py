"""Saves take each byte's CRC32C once, as torch.save writes it: the file's CRC32C and
the tensors' CRC32Cs in the manifest are those of the real bytes, whatever the tensors share."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
crc32c = pytest.importorskip("crc32c")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import Spec, validate  # noqa: E402
from ckptspec.adapters import _torch_io, _torch_tensors  # noqa: E402
from ckptspec.adapters._torch_tensors import crc32c_of  # noqa: E402

SPEC = Spec.model_validate({
    "name": "checksums", "framework": "torch",
    "components": {name: {"require": "optional"} for name in ("optimizer", "config", "rng", "data_position", "fingerprint")},
    "integrity": {"file_digest": "crc32c", "tensor_checksum": "crc32c"},
})  # fmt: skip


class Shared(torch.nn.Module):
    """Tensors that are whole storages, a tied weight, slices of one storage and a transposed view."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(256, 256)
        self.decoder = torch.nn.Linear(256, 256)
        self.decoder.weight = self.encoder.weight  # tied: one storage, two names
        table = torch.randn(512, 128)
        self.register_buffer("head", table[:256])  # starts the storage, but is half of it
        self.register_buffer("tail", table[256:])  # an offset into the same storage
        self.register_buffer("transposed", torch.randn(128, 256).t())  # a whole storage, not contiguous


def test_file_and_tensor_crc32cs_are_those_of_the_written_bytes(tmp_path: Path) -> None:
    model = Shared()
    optimizer = torch.optim.Adam(model.parameters())
    model.encoder(torch.randn(2, 256)).sum().backward()
    optimizer.step()
    path = tmp_path / "shared.pt"
    path.write_bytes(b"the previous checkpoint")
    manifest = ckpt.save(path, model=model, optimizer=optimizer, spec=SPEC)

    assert manifest.files[0].crc32c == f"{crc32c.crc32c(path.read_bytes()):08x}"
    state = model.state_dict()
    recorded = {entry.name: entry.crc32c for entry in manifest.components.model.tensors}
    assert recorded == {name: crc32c_of(tensor) for name, tensor in state.items()}
    assert [(finding.code, finding.message) for finding in validate(path).findings if finding.family == "integrity"] == []


def test_buffers_not_taken_ahead_from_memory_are_checksummed_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Storages torch.save copies before writing (a GPU tensor's) are checksummed from the copy it writes.
    model = Shared()
    ahead = ckpt.save(tmp_path / "ahead.pt", model=model, spec=SPEC)
    monkeypatch.setattr(_torch_io, "_cpu_storages", lambda obj: {})
    as_written = ckpt.save(tmp_path / "written.pt", model=model, spec=SPEC)

    assert as_written.files[0].crc32c == f"{crc32c.crc32c((tmp_path / 'written.pt').read_bytes()):08x}"
    assert as_written.components.model.tensors == ahead.components.model.tensors


def test_whole_storages_are_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    read_again: list[int] = []
    original = _torch_tensors.crc32c_of
    monkeypatch.setattr(_torch_tensors, "crc32c_of", lambda tensor: (read_again.append(tensor.nbytes), original(tensor))[1])
    manifest = ckpt.save(tmp_path / "model.pt", model=model, spec=SPEC)
    assert all(entry.crc32c for entry in manifest.components.model.tensors)
    assert read_again == [512 * 4, 512 * 4]  # only the biases, too small to be checksummed on their own


def test_the_callback_overwrites_last_ckpt_in_one_step_with_the_checksums_of_its_bytes(tmp_path: Path) -> None:
    pl = pytest.importorskip("pytorch_lightning")
    from ckptspec import load_manifest, manifest_path_for
    from ckptspec.lightning import CkptspecCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(256, 256)

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 256)), batch_size=4)

    module = Module()
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
               default_root_dir=tmp_path, callbacks=[checkpoints, CkptspecCallback(spec=SPEC)]).fit(module)  # fmt: skip

    last = tmp_path / "last.ckpt"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.ckptspec.yaml"]  # overwritten, nothing left
    manifest = load_manifest(manifest_path_for(last))
    assert manifest.files[0].crc32c == f"{crc32c.crc32c(last.read_bytes()):08x}"
    saved = torch.load(last, weights_only=True)["state_dict"]
    assert {entry.name: entry.crc32c for entry in manifest.components.model.tensors} == {name: crc32c_of(t) for name, t in saved.items()}
