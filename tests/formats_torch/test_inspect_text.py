"""`inspect`'s text for a pipe is drawn without rich: it must be, character for character, what rich
prints there; and whatever rich must measure itself (wide characters, tabs) still goes through rich."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ckptspec.cli import _inspect_text
from ckptspec.formats.inspect import inspect_checkpoint

torch = pytest.importorskip("torch")


def _files(directory: Path) -> dict[str, Path]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    files = {
        "trainer": {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3},
        "lightning": {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
                      "epoch": 1, "global_step": 10, "pytorch-lightning_version": "2.6.6"},  # fmt: skip
        "empty": {},
        "one long key": {"a" * 300: torch.zeros(1)},
        "wide key": {"重み": torch.zeros(2)},
        "tab in key": {"a\tb": torch.zeros(2)},
    }
    paths = {}
    for name, state in files.items():
        paths[name] = directory / f"{name.replace(' ', '-')}.pt"
        torch.save(state, paths[name])
    paths["bare pickle"] = directory / "calls.pkl"
    paths["bare pickle"].write_bytes(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idq\x00\x85R." + pickle.dumps([1]))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("inspect-text"))


def _through_rich(blocks: list, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    _inspect_text._render_rich(blocks)
    return capsys.readouterr().out


@pytest.mark.parametrize("name", ["trainer", "lightning", "empty", "one long key", "bare pickle"])
def test_drawn_for_a_pipe_as_rich_draws_it(files: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = list(_inspect_text._blocks(inspect_checkpoint(files[name]), tensors=True))
    assert _inspect_text._drawn_here(blocks)
    drawn = "".join(_inspect_text._plain(block) for block in blocks)
    assert drawn == _through_rich(blocks, capsys)


@pytest.mark.parametrize("name", ["wide key", "tab in key"])
def test_what_rich_must_measure_goes_through_rich(files: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = list(_inspect_text._blocks(inspect_checkpoint(files[name]), tensors=True))
    assert not _inspect_text._drawn_here(blocks)
    capsys.readouterr()
    _inspect_text.render_text(inspect_checkpoint(files[name]), tensors=True)
    assert capsys.readouterr().out == _through_rich(blocks, capsys)


def test_a_piped_inspect_does_not_import_rich(files: dict[str, Path]) -> None:
    probe = "import sys; from ckptspec.cli import main\ntry: main(sys.argv[1:])\nfinally: print('rich' in sys.modules, file=sys.stderr)"
    environment = {key: value for key, value in os.environ.items() if key not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    command = [sys.executable, "-c", probe, "inspect", "--tensors", str(files["lightning"])]
    done = subprocess.run(command, capture_output=True, text=True, env=environment | {"PYTHONIOENCODING": "utf-8"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False"
    assert "┏" in done.stdout and "tensors" in done.stdout
