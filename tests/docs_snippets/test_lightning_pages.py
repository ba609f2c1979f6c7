"""README's first example and the Lightning pages, run as written on a real `Trainer.fit`."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from ._markdown import Block, blocks, run_commands, run_python  # noqa: E402


class Model(pl.LightningModule):
    def __init__(self, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.cross_entropy(self(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def _reader_namespace() -> dict[str, Any]:
    """What the pages take the reader to have: a model, its data (4 batches an epoch), a fixed batch,
    and Lightning's classes; the Trainer runs 2 epochs quietly on the CPU."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(32, 4, generator=generator), torch.randint(0, 3, (32,), generator=generator)),
        batch_size=8,
    )
    trainer = functools.partial(
        pl.Trainer, max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    return {"model": Model(), "data": data, "fixed_batch": torch.randn(6, 4), "Trainer": trainer, "ModelCheckpoint": pl.callbacks.ModelCheckpoint}


def _all_succeed(block: Block) -> None:
    for line, code, output in run_commands(block):
        assert code == 0, f"{block.where}: {line!r} exited {code}:\n{output}"


def test_readme_first_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_spec, train, check = blocks("README.md", "A first example")
    _all_succeed(write_spec)
    namespace = run_python(train, _reader_namespace())
    assert Path("ckpts/epoch=1-step=8.ckpt").is_file() and Path("ckpts/epoch=1-step=8.ckpt.ckptspec.yaml").is_file()
    assert namespace["callback"].last_report is not None
    _all_succeed(check)


def test_getting_started_spec_and_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (write_spec,) = blocks("docs/getting-started.md", "Write a spec", "bash")
    _all_succeed(write_spec)
    (train,) = blocks("README.md", "A first example")[1:2]
    run_python(train, _reader_namespace())
    shutil.copytree("ckpts", "registry/incoming")  # the checkpoints, handed in at intake
    validate, audit, rule = run_commands(blocks("docs/getting-started.md", "Validate in CI and at intake")[0])
    assert validate[1] == 0, validate
    assert audit[1] == 0 and Path("audit.sarif").is_file(), audit
    assert rule[1] == 0 and "CKS207" in rule[2], rule


def test_lightning_page_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from click.testing import CliRunner

    from ckptspec.cli import cli

    assert CliRunner().invoke(cli, ["init", "--framework", "lightning", "-o", "ckptspec.yaml"]).exit_code == 0
    (example,) = blocks("docs/adapters/lightning.md", "Lightning adapter: `ckptspec.lightning`")
    namespace = run_python(example, _reader_namespace())
    report = namespace["callback"].last_report
    assert report.restored[0] == "model" and report.tensors_loaded == report.tensors_saved
    assert Path("ckpt/last.ckpt").is_symlink() and Path("ckpt/last.ckpt.ckptspec.yaml").exists()
