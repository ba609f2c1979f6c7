"""The PyTorch page's example, run as written under the starter spec `ckptspec init` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from ckptspec.cli import cli  # noqa: E402

from ._markdown import blocks, run_python  # noqa: E402


def _reader_namespace() -> dict[str, Any]:
    """A model, its optimizer and scheduler, a training step and a fixed batch: what the page assumes."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)

    def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,))).backward()
        optimizer.step()
        scheduler.step()

    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "train_step": train_step, "steps": 3, "fixed_batch": torch.randn(6, 4)}


def test_torch_page_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--framework", "torch", "-o", "ckptspec.yaml"]).exit_code == 0
    (example,) = blocks("docs/adapters/torch.md", "Example", "python")
    namespace = run_python(example, _reader_namespace())
    assert namespace["report"].restored == ("model", "optimizer", "scheduler", "rng", "data_position", "fingerprint")
    assert capsys.readouterr().out == "('model', 'optimizer', 'scheduler', 'rng', 'data_position', 'fingerprint')\n"
    result = runner.invoke(cli, ["validate", "last.pt"])
    assert result.exit_code == 0, result.output
