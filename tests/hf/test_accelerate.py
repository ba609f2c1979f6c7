"""`ckptspec.accelerate.track`: a real `Accelerator.save_state` directory read as one checkpoint,
its manifest written beside it, a damaged file named before `load_state` puts anything back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import RestoreError, validate
from ckptspec.cli import cli
from ckptspec.formats.detect import detect

from .test_trainer_intake import flip_in_largest_record

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

from ckptspec.accelerate import track  # noqa: E402


def prepared(tmp_path: Path, *, train: bool = True) -> tuple[object, torch.nn.Module, torch.optim.Optimizer, object]:
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True, project_dir=str(tmp_path))
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(24, 8), torch.randint(0, 2, (24,))), batch_size=4, shuffle=True)
    net, optimizer, data, scheduler = accelerator.prepare(net, optimizer, data, scheduler)
    track(accelerator)
    for inputs, labels in data if train else []:
        accelerator.backward(torch.nn.functional.cross_entropy(net(inputs), labels))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return accelerator, net, optimizer, scheduler


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("accelerate")
    accelerator, *_ = prepared(root)
    accelerator.save_state(str(root / "state"))
    return root / "state"


def test_save_state_is_one_checkpoint_with_its_manifest_beside_it(saved: Path) -> None:
    assert detect(saved).kind == "accelerate"
    manifest = saved.with_name("state.ckptspec.yaml")
    text = manifest.read_text()
    assert "format: accelerate" in text and "at: /optimizer" in text and "random_states_0/" in text
    result = CliRunner().invoke(cli, ["validate", str(saved)])
    assert result.exit_code == 0, result.output
    assert "CKS401" not in result.output


def test_a_flipped_byte_in_the_optimizer_is_named_and_refused_at_load(saved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "state"
    shutil.copytree(saved, copy)
    shutil.copy(saved.with_name("state.ckptspec.yaml"), tmp_path / "state.ckptspec.yaml")
    flip_in_largest_record(copy / "optimizer.bin")
    result = validate(copy)
    damaged = [finding for finding in result.findings if finding.code == "CKS209"]
    assert len(damaged) == 1 and damaged[0].file.endswith("optimizer.bin") and damaged[0].pointer.startswith("/optimizer/state/")
    accelerator, *_ = prepared(tmp_path / "fresh", train=False)
    with pytest.raises(RestoreError, match=r"optimizer\.bin"):
        accelerator.load_state(str(copy))


def test_a_clean_load_restores_the_saved_state(saved: Path, tmp_path: Path) -> None:
    accelerator, net, optimizer, scheduler = prepared(tmp_path, train=False)
    assert scheduler.scheduler.last_epoch == 0
    accelerator.load_state(str(saved))
    assert scheduler.scheduler.last_epoch == 6
    assert all(int(state["step"]) == 6 for state in optimizer.state_dict()["state"].values())
