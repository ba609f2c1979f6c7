"""Session-wide checkpoints written by the real frameworks, each with a manifest beside it.

Manifests come from `ckptspec manifest` (adoption) against a spec that requires what such a file can
hold; `corrupt` fixtures copy a checkpoint into a fresh directory for one test to damage.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import load_spec
from ckptspec._models import Spec
from ckptspec.adopt import adopt
from ckptspec.cli import cli

HERE = Path(__file__).resolve().parent

LIGHTNING_SPEC = """\
ckptspec: "1.0"
kind: spec
name: tiny-lightning
framework: lightning
components:
  config: {require: optional}
  scheduler: {require: required}
  rng: {require: optional}
  fingerprint: {require: optional}
"""

TF_SPEC = """\
ckptspec: "1.0"
kind: spec
name: tiny-keras
framework: tensorflow
components:
  config: {require: optional}
  rng: {require: optional}
  fingerprint: {require: optional}
  data_position: {require: optional}
"""

TORCH_SPEC = """\
ckptspec: "1.0"
kind: spec
name: tiny-torch
framework: torch
components:
  config: {require: optional}
  scheduler: {require: required}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
"""


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


_UNSHARE = ("unshare", "--user", "--map-user=1000")


def run_cli_unprivileged(*args: str | Path) -> tuple[int, str, str]:
    """`run_cli` where file permissions bite: root reads every file, so as root the CLI runs in a
    user namespace that maps it to an ordinary user; the test is skipped where that is refused."""
    command = [sys.executable, "-m", "ckptspec", *map(str, args)]
    if os.geteuid() == 0:
        if not _user_namespaces_work():
            pytest.skip("running as root, and `unshare --user` is not available to drop the privilege")
        command = [*_UNSHARE, *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


@functools.cache
def _user_namespaces_work() -> bool:
    return shutil.which("unshare") is not None and subprocess.run([*_UNSHARE, "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("specs")
    paths = {}
    for name, text in (("lightning", LIGHTNING_SPEC), ("tf", TF_SPEC), ("torch", TORCH_SPEC)):
        paths[name] = directory / f"{name}.yaml"
        paths[name].write_text(text)
    return paths


def _spec(specs: dict[str, Path], name: str) -> Spec:
    return load_spec(specs[name])


@pytest.fixture(scope="session")
def lightning_checkpoint(tmp_path_factory: pytest.TempPathFactory, specs: dict[str, Path]) -> Path:
    """The last epoch's checkpoint of a real `Trainer.fit` (Adam + StepLR, BatchNorm, hparams)."""
    pytest.importorskip("pytorch_lightning")
    from ._lightning_training import fit

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = fit(tmp_path_factory.mktemp("lightning"))
    adopt(checkpoint, _spec(specs, "lightning"))
    return checkpoint


@pytest.fixture(scope="session")
def torch_checkpoint(tmp_path_factory: pytest.TempPathFactory, specs: dict[str, Path]) -> Path:
    """A plain `torch.save` of model, optimizer and scheduler state after two training steps."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
    path = tmp_path_factory.mktemp("torch") / "model.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, path)
    adopt(path, _spec(specs, "torch"))
    return path


@pytest.fixture(scope="session")
def tf_checkpoints(tmp_path_factory: pytest.TempPathFactory, specs: dict[str, Path]) -> dict[str, Path]:
    """TF bundle prefixes from real Keras training: `run` (CheckpointManager dir), `latest`, `first`,
    `sharded` (five data shards) and `model_only` (no optimizer tracked)."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("tf")
    subprocess.run([sys.executable, str(HERE / "_tf_training.py"), str(out)], check=True, capture_output=True)
    prefixes = {
        "latest": out / "run" / "ckpt-2",
        "first": out / "run" / "ckpt-1",
        "sharded": out / "sharded" / "ckpt",
        "model_only": out / "model_only" / "ckpt",
    }
    for prefix in prefixes.values():
        adopt(prefix, _spec(specs, "tf"))
    return {"run": out / "run", **prefixes}


@pytest.fixture(scope="session")
def unread_formats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints real torch writes beside torch.save's zip format: a TorchScript archive, a legacy
    (pre-1.6) torch.save file and a torch.distributed.checkpoint (DCP) directory."""
    torch = pytest.importorskip("torch")
    from torch.distributed import checkpoint as dcp

    out = tmp_path_factory.mktemp("unread-formats")
    model = torch.nn.Linear(3, 2)
    paths = {"torchscript": out / "scripted.pt", "legacy": out / "legacy.pt", "dcp": out / "dcp"}
    torch.jit.save(torch.jit.script(model), paths["torchscript"])
    torch.save(model.state_dict(), paths["legacy"], _use_new_zipfile_serialization=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model.state_dict()}, checkpoint_id=paths["dcp"])
    return paths


def copy_checkpoint(source: Path, destination: Path) -> Path:
    """Copy a checkpoint (file or TF prefix) and its manifest into `destination`."""
    destination.mkdir(parents=True, exist_ok=True)
    for path in source.parent.glob(f"{source.name}*"):
        if path.is_file():
            shutil.copy2(path, destination / path.name)
    return destination / source.name


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    return lambda source: copy_checkpoint(source, tmp_path / "copy")
