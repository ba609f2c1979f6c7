"""`torch.save(model)` run as a script pickles the model's class as `__main__.<Name>`: a legitimate
CKS401 (loading it imports code), which the operator can allow by that exact name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from ckptspec import validate
from ckptspec._pickle_policy import operator_allow_problem

from .conftest import run_cli


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)


@pytest.fixture
def script_pickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The whole-module pickle a training script writes: its class lives in `__main__`."""
    monkeypatch.setattr(Net, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "Net", Net, raising=False)
    path = tmp_path / "model.pt"
    torch.save(Net(), path)
    return path


def _dangerous(path: Path, spec: Path | None = None) -> list[str]:
    return [f.message for f in validate(path, spec).findings if f.code == "CKS401"]


def test_each_class_is_named_and_can_be_allowed(script_pickle: Path, tmp_path: Path) -> None:
    named = ["__main__.Net", "torch.nn.modules.linear.Linear"]
    assert _dangerous(script_pickle) == [
        f"pickle names {name} (1×), which is not on the allow-list: loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)" for name in named
    ]
    spec = tmp_path / "spec.yaml"
    assert run_cli("init", "--framework", "torch", "-o", spec)[0] == 0
    spec.write_text(spec.read_text().replace("  allow: []", f"  allow: [{', '.join(named)}]"))
    assert _dangerous(script_pickle, spec) == []
    assert run_cli("manifest", "--spec", spec, script_pickle)[0] == 0


@pytest.mark.parametrize("entry", ["__main__.__builtins__", "__main__.os.system", "__main__.Net.__init__", "pkg.__main__.Net"])
def test_no_entry_reaches_past_a_script_class(entry: str) -> None:
    assert operator_allow_problem(entry) is not None
