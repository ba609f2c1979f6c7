"""The manifest's records are built while the last storages are written and before the new file
takes its place: a failure writing or recording keeps the previous file and leaves nothing behind,
and the file holds exactly the bytes torch.save hands over."""

from __future__ import annotations

import hashlib
import io
import os
import signal
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import WriteError, load_manifest, manifest_path_for  # noqa: E402
from ckptspec._documents import dump_document  # noqa: E402
from ckptspec._atomic import staged_file  # noqa: E402
from ckptspec._commit import lock_path_for, saving  # noqa: E402
from ckptspec.adapters._torch_io import write_staged_described  # noqa: E402
from ckptspec.adapters._torch_tensors import crc32c_of  # noqa: E402

from ._tiny import Net, train_step  # noqa: E402


class BrokenConstant(torch.nn.Module):
    """A layer whose declared constant cannot be read: recording its config fails."""

    __constants__ = ["width"]

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(256, 256)

    @property
    def width(self) -> int:
        raise RuntimeError("width is computed from a device that is gone")


def _previous_checkpoint(path: Path) -> bytes:
    ckpt.save(path, model=Net())
    return path.read_bytes()


def _save_described(state: Any, path: Path, *, algorithms: tuple[str, ...], describe: Any) -> tuple[Any, Any]:
    """What `ckptspec.torch.save` does with the file: written while described, then swapped in."""
    with staged_file(path, durable=False) as staged:
        described = write_staged_described(state, staged, algorithms=algorithms, describe=describe)  # type: ignore[arg-type]
        staged.swap()
    return described


def test_a_failure_recording_the_model_keeps_the_previous_checkpoint_and_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    previous = _previous_checkpoint(path)

    with pytest.raises(RuntimeError, match="width is computed from a device that is gone"):
        ckpt.save(path, model=BrokenConstant())

    assert path.read_bytes() == previous
    assert sorted(entry.name for entry in tmp_path.iterdir() if entry.name.endswith(".tmp")) == []


def test_a_failing_write_is_a_write_error_and_keeps_the_previous_pair(tmp_path: Path) -> None:
    resource = pytest.importorskip("resource")
    path = tmp_path / "model.pt"
    previous = _previous_checkpoint(path)
    recorded = manifest_path_for(path).read_bytes()

    big = torch.nn.Sequential(*(torch.nn.Linear(512, 512) for _ in range(4)))  # 4 MiB, written storage by storage
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, limits[1]))
    try:
        with pytest.raises(WriteError) as raised:
            ckpt.save(path, model=big)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)

    assert str(raised.value) == (
        f"{path}: not saved: the new checkpoint could not be written (File too large); the previous checkpoint "
        "and its manifest are kept"
    )
    assert path.read_bytes() == previous and manifest_path_for(path).read_bytes() == recorded
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["model.pt", "model.pt.ckptspec.yaml"]


def test_the_records_get_the_crc32c_of_each_large_storage_as_written(tmp_path: Path) -> None:
    tensors = {"big": torch.randn(256, 256), "small": torch.randn(8), "other": torch.arange(40_000, dtype=torch.int32)}
    written, seen = _save_described(
        tensors, tmp_path / "t.pt", algorithms=("crc32c",), describe=lambda written: dict(written.storage_crc32c)
    )

    large = {name: tensor for name, tensor in tensors.items() if tensor.nbytes >= 1 << 16}
    keys = {(tensor.untyped_storage().data_ptr(), tensor.nbytes): name for name, tensor in large.items()}
    assert {keys[key]: value for key, value in seen.items()} == {name: crc32c_of(tensor) for name, tensor in large.items()}
    assert written.storage_crc32c == seen
    assert torch.load(tmp_path / "t.pt", weights_only=True).keys() == tensors.keys()


def test_the_records_describe_the_state_saved(tmp_path: Path) -> None:
    model = torch.nn.Transformer(
        d_model=32, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=64, batch_first=True
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model(torch.randn(2, 3, 32), torch.randn(2, 4, 32)).sum().backward()
    optimizer.step()
    path = tmp_path / "transformer.pt"
    manifest = ckpt.save(path, model=model, optimizer=optimizer)

    saved = torch.load(path, weights_only=True)
    recorded = {entry.name: (entry.shape, entry.crc32c) for entry in manifest.components.model.tensors}
    assert recorded == {name: (list(tensor.shape), crc32c_of(tensor)) for name, tensor in saved["model"].items()}
    assert len(manifest.components.config.modules) == len(list(model.named_modules(remove_duplicate=False)))
    groups = manifest.components.optimizer[0].param_groups
    assert [ref.index for ref in groups[0].params] == saved["optimizers"][0]["param_groups"][0]["params"]
    assert manifest_path_for(path).read_text(encoding="utf-8") == dump_document(manifest)
    report = ckpt.restore(path, model=model, optimizer=optimizer)
    assert report.tensors_loaded == len(saved["model"])


def test_the_manifest_written_is_the_document_returned_byte_for_byte(tmp_path: Path, fixed_batch: torch.Tensor) -> None:
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    train_step(model, optimizer, scheduler)
    ema = torch.optim.swa_utils.AveragedModel(model)
    odd = {"note": "key: value # not a comment\nsecond line", "empty": "", "accent": "réseau", "yes": "yes", "list": [1, "2"]}
    path = tmp_path / "complete.pt"
    manifest = ckpt.save(
        path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=torch.amp.GradScaler("cpu"), ema=ema,
        data_position=ckpt.DataPosition(epoch=1, global_step=3), fingerprint_batch=fixed_batch, hyperparameters=odd,
    )  # fmt: skip

    assert manifest_path_for(path).read_text(encoding="utf-8") == dump_document(manifest)
    assert load_manifest(manifest_path_for(path)) == manifest


@pytest.mark.parametrize("digest", ["crc32c", "sha256"])
def test_the_file_holds_the_bytes_torch_save_writes_however_they_are_handed_over(tmp_path: Path, digest: str) -> None:
    # Storages are written behind the caller, several per system call; the pickle (here over
    # 64 KiB, and valid only during its write) at once; torch's small records copied, 12 MiB of
    # them here, more than the write thread is let fall behind by. With SHA-256 every write goes
    # through the digest writer at once.
    crc32c = pytest.importorskip("crc32c")
    big = torch.randn(300, 300)
    state = {
        "many": {f"t{index}": torch.randn(500) for index in range(6000)},
        "big": big,
        "tied": big,
        "slice": torch.randn(1000, 100)[10:20],
        "empty": torch.empty(0),
    }
    expected = io.BytesIO()
    torch.save(state, expected)

    written, _ = _save_described(state, tmp_path / "s.pt", algorithms=(digest,), describe=lambda written: None)

    assert (tmp_path / "s.pt").read_bytes() == expected.getvalue()
    assert written.size == len(expected.getvalue())
    if digest == "crc32c":
        assert written.digests.crc32c == f"{crc32c.crc32c(expected.getvalue()):08x}"
    else:
        assert written.digests.sha256 == hashlib.sha256(expected.getvalue()).hexdigest()


@pytest.fixture(autouse=True)
def _python_ctrl_c() -> Any:
    """Ctrl-C as Python handles it by default, whatever an earlier test or library installed."""
    installed = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, installed)


class _CtrlC:
    """Pickled between the storages: the user presses Ctrl-C there (a real SIGINT, delivered to this process)."""

    def __reduce__(self) -> tuple[Any, ...]:
        signal.raise_signal(signal.SIGINT)
        return (int, ())


@pytest.mark.parametrize("when", ["while the storages are written", "as the records are made"])
def test_ctrl_c_during_a_save_is_raised_once_the_previous_pair_is_back(tmp_path: Path, when: str) -> None:
    path = tmp_path / "model.pt"
    previous = _previous_checkpoint(path)
    recorded = manifest_path_for(path).read_bytes()
    state: dict[str, Any] = {f"layer{index}": torch.randn(1024, 1024) for index in range(8)}  # 32 MiB
    if when == "while the storages are written":
        state = {"first": state, "ctrl-c": _CtrlC(), "then": {f"more{index}": torch.randn(1024, 1024) for index in range(8)}}

    def describe(written: object) -> None:
        if when == "as the records are made":
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        with saving(path) as commit, commit.file() as staged:
            write_staged_described(state, staged, algorithms=("crc32c",), describe=describe)
            pytest.fail("the save went on after Ctrl-C")

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert path.read_bytes() == previous and manifest_path_for(path).read_bytes() == recorded
    assert not lock_path_for(path).exists()
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["model.pt", "model.pt.ckptspec.yaml"]


def test_ctrl_c_while_the_pair_is_committed_is_raised_once_the_new_pair_is_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.pt"
    previous = _previous_checkpoint(path)
    renamed = os.replace

    def ctrl_c_then_rename(source: Any, target: Any) -> None:
        if str(source).endswith(".ckptspec.pending.yaml"):  # the record becoming the manifest: the last step
            signal.raise_signal(signal.SIGINT)
        renamed(source, target)

    monkeypatch.setattr(os, "replace", ctrl_c_then_rename)
    model = Net()
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(path, model=model)
    monkeypatch.undo()

    assert path.read_bytes() != previous
    assert torch.load(path, weights_only=True)["model"].keys() == model.state_dict().keys()
    assert ckpt.restore(path, model=Net()).tensors_loaded == len(model.state_dict())
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["model.pt", "model.pt.ckptspec.yaml"]


def test_ctrl_c_under_a_handler_of_the_programs_own_reaches_it_once_the_pair_is_in_place(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    _previous_checkpoint(path)
    pressed: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    state = {"first": {"w": torch.randn(256, 256)}, "ctrl-c": _CtrlC(), "then": {"v": torch.randn(256, 256)}}

    with saving(path) as commit, commit.file() as staged:
        write_staged_described(state, staged, algorithms=("crc32c",), describe=lambda written: None)

    assert pressed == [signal.SIGINT]  # once, after the save, by the program's own handler
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["model.pt", "model.pt.ckptspec.yaml"]
