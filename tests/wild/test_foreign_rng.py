"""Generator states a training script saved in their libraries' own forms (`random.getstate()`,
`torch.get_rng_state()`, keyed as a Hugging Face Trainer keys them) are adopted by name and put
back by a restore of the adopted checkpoint. (numpy's state is left out: `torch.load(weights_only=True)`,
which a restore uses, refuses numpy arrays.)"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn

import ckptspec.torch as ckpt
from ckptspec import load_manifest
from ckptspec.adopt import adopt


def _draws() -> tuple[float, float]:
    return random.random(), float(torch.rand(1))


def test_an_adopted_script_checkpoint_restores_its_generators(tmp_path: Path) -> None:
    model = nn.Linear(3, 1)
    states = {"python": random.getstate(), "cpu": torch.random.get_rng_state()}
    expected = _draws()
    path = tmp_path / "run.pt"
    torch.save({"model": model.state_dict(), "rng_state": states}, path)
    rng = load_manifest(adopt(path)).components.rng
    assert rng is not None and [(g.name, g.at) for g in rng.generators] == [
("python", "/rng_state/python"), ("torch", "/rng_state/cpu")]
    _draws()
    report = ckpt.restore(path, model=nn.Linear(3, 1))
    assert "rng" in report.restored
    assert _draws() == expected
