"""One `CkptspecCallback` for both Lightning namespaces: a real fit and resume under each, in one process."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

import ckptspec  # noqa: E402
from ckptspec import Spec, load_manifest, manifest_path_for  # noqa: E402
from ckptspec.adapters import import_installed_frameworks  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

from ._tiny import Net, seed_everything  # noqa: E402

FIXED_BATCH = torch.linspace(-2, 2, 24).reshape(6, 4)
SPEC = Spec.model_validate({"name": "both-namespaces"})
DISTRIBUTIONS = {"lightning.pytorch": "lightning", "pytorch_lightning": "pytorch-lightning"}


@pytest.fixture(params=sorted(DISTRIBUTIONS))
def namespace(request: pytest.FixtureRequest) -> ModuleType:
    return pytest.importorskip(request.param)


def _tiny_module(namespace: ModuleType) -> Any:
    """A LightningModule of `namespace`: its Trainer refuses a module from the other one."""

    class TinyModule(namespace.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
            inputs, targets = batch
            return torch.nn.functional.cross_entropy(self(inputs + 0.01 * torch.randn_like(inputs)), targets)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

        def train_dataloader(self) -> torch.utils.data.DataLoader:
            generator = torch.Generator().manual_seed(0)
            inputs, targets = torch.randn(16, 4, generator=generator), torch.randint(0, 3, (16,), generator=generator)
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=8, shuffle=True)

    return TinyModule()


def _trainer(namespace: ModuleType, root: Path, callbacks: Any, **options: Any) -> Any:
    """A Trainer of a project's own subclass, whose module is not Lightning's."""
    project_trainer = type("ProjectTrainer", (namespace.Trainer,), {})
    return project_trainer(
        default_root_dir=root, max_epochs=2, callbacks=callbacks, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **options,
    )  # fmt: skip


def test_the_callback_is_a_callback_of_every_installed_namespace(namespace):
    callback = CkptspecCallback()
    assert isinstance(callback, namespace.Callback)
    # A lone callback, not in a list, is recognised only through isinstance.
    assert callback in _trainer(namespace, Path("."), callback, enable_checkpointing=False).callbacks


def test_fit_and_resume_under_each_namespace(namespace, tmp_path):
    seed_everything(0)
    module = _tiny_module(namespace)
    every_epoch = namespace.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
    _trainer(namespace, tmp_path, [every_epoch, CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH)]).fit(module)
    first = tmp_path / "ckpt" / "epoch=0-step=2.ckpt"

    manifest = load_manifest(manifest_path_for(first))
    distribution = DISTRIBUTIONS[namespace.__name__]
    assert set(manifest.producer.frameworks) == {"torch", distribution}
    assert manifest.producer.frameworks[distribution] == namespace.__version__
    result = ckptspec.validate(first)
    assert (result.format, result.passed) == ("lightning", True), [finding.message for finding in result.findings]

    seed_everything(321)  # the generators must come from the checkpoint
    resumed = _tiny_module(namespace)
    callback = CkptspecCallback(spec=SPEC, fingerprint_batch=FIXED_BATCH)
    _trainer(namespace, tmp_path / "resumed", callback, enable_checkpointing=False).fit(resumed, ckpt_path=first)
    report = callback.last_report
    assert report is not None and report.fingerprint_replayed and report.tensors_loaded == report.tensors_saved
    for name, tensor in module.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name


@pytest.mark.parametrize("missing, remaining", [("lightning", "pytorch_lightning"), ("pytorch_lightning", "lightning.pytorch")])
def test_with_one_namespace_installed_the_callback_subclasses_only_that_one(missing, remaining):
    pytest.importorskip(remaining)
    script = (
        f"import sys; sys.modules[{missing!r}] = None\n"  # what an environment without it looks like to import
        "from ckptspec.lightning import CkptspecCallback\n"
        "print(*(base.__module__ for base in CkptspecCallback.__bases__))"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert completed.stdout.split() == [f"{remaining}.callbacks.callback"]


def test_no_namespace_installed_names_the_extra():
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'ckptspec\[lightning\]'"):
        import_installed_frameworks("ckptspec_absent_a", "ckptspec_absent_b", extra="lightning")


def test_a_broken_namespace_raises_its_own_error(monkeypatch):
    def broken(name: str) -> ModuleType:
        raise ModuleNotFoundError("No module named 'lightning_utilities'", name="lightning_utilities")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="lightning_utilities"):
        import_installed_frameworks("lightning.pytorch", extra="lightning")
