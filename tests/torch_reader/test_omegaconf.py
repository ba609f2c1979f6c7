"""Real OmegaConf hyper-parameters: a Lightning module saving a DictConfig, read without torch or omegaconf."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")
omegaconf = pytest.importorskip("omegaconf")

import ckptspec  # noqa: E402
from ckptspec import Spec, load_manifest, manifest_path_for  # noqa: E402
from ckptspec.formats._pickle_safety import Stub  # noqa: E402
from ckptspec.formats.lightning import LightningCheckpoint  # noqa: E402
from ckptspec.formats.torchzip import open_torch_checkpoint  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

CONFIG = {
    "optim": {"lr": 0.05, "betas": [0.9, 0.99], "momentum": "???"},  # Lightning refuses `???` at the top only
    "layers": [4, 8],
    "name": "tiny",
    "warmup_lr": "${optim.lr}",
}
OMEGACONF_GLOBALS = {
    "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.nodes.AnyNode",
    "omegaconf.base.ContainerMetadata", "omegaconf.base.Metadata",
}  # fmt: skip
# OmegaConf's node metadata pickles these types by reference (object_type, key_type, resolver_cache).
METADATA_TYPES = ["builtins.dict", "builtins.int", "builtins.list", "collections.defaultdict", "typing.Any"]


class ConfiguredModule(pl.LightningModule):
    def __init__(self, config: omegaconf.DictConfig) -> None:
        super().__init__()
        self.save_hyperparameters(config)
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: list[torch.Tensor], batch_index: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.optim.lr)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)


def _spec(*allowed: str) -> Spec:
    return Spec.model_validate(
        {"name": "omegaconf-hparams", "components": {"fingerprint": {"require": "optional"}}, "pickle": {"allow": list(allowed)}}
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("omegaconf")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    trainer = pl.Trainer(
        default_root_dir=directory, max_epochs=1, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=directory), CkptspecCallback(spec=_spec())],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(ConfiguredModule(omegaconf.OmegaConf.create(CONFIG)))
    return directory / "epoch=0-step=2.ckpt"


def test_omegaconf_containers_are_on_the_allow_list(checkpoint):
    # Rebuilding them is object.__new__ plus a __setstate__ that stores the state: nothing resolves.
    with open_torch_checkpoint(checkpoint) as opened:
        safety = {used.qualname: used.safety for used in opened.globals if used.module.startswith("omegaconf.")}
    assert safety == dict.fromkeys(OMEGACONF_GLOBALS, "allowed")


def test_hyper_parameters_are_stubs_that_keep_the_config_as_written(checkpoint):
    with open_torch_checkpoint(checkpoint) as opened:
        hyper_parameters = LightningCheckpoint.recognise(opened.tree).hyper_parameters
    assert isinstance(hyper_parameters.values, Stub) and hyper_parameters.values.qualname == "omegaconf.dictconfig.DictConfig"
    assert issubclass(hyper_parameters.container_type, Stub) and hyper_parameters.container_type.name == "DictConfig"
    assert hyper_parameters.name == "config"
    assert _stub_content(hyper_parameters.values) == CONFIG


def _stub_content(node: Any) -> Any:
    """The plain value a stubbed DictConfig, ListConfig or AnyNode recorded from its pickled state."""
    if isinstance(node, Stub) and node.name in {"DictConfig", "ListConfig"}:
        return _stub_content(node.state["_content"])
    if isinstance(node, Stub) and node.name == "AnyNode":
        return node.state["_val"]
    if isinstance(node, dict):
        return {key: _stub_content(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_stub_content(value) for value in node]
    return node


def test_reading_imports_nothing_the_file_names(checkpoint):
    script = (
        "import sys\n"
        "from ckptspec.formats.torchzip import open_torch_checkpoint\n"
        "from ckptspec.formats.lightning import LightningCheckpoint\n"
        f"with open_torch_checkpoint({str(checkpoint)!r}) as opened:\n"
        "    LightningCheckpoint.recognise(opened.tree).hyper_parameters\n"
        "print(sorted(m for m in ('omegaconf', 'torch', 'pytorch_lightning') if m in sys.modules))"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert completed.stdout.strip() == "[]"


def test_manifest_records_the_config_as_written(checkpoint):
    manifest = load_manifest(manifest_path_for(checkpoint))
    assert manifest.components.config.hyperparameters == CONFIG


def test_omegaconf_hyper_parameters_pass_without_an_allowance(checkpoint):
    with open_torch_checkpoint(checkpoint) as opened:
        safety = {ref.qualname: ref.safety for ref in opened.globals}
    assert {name: safety[name] for name in METADATA_TYPES} == dict.fromkeys(METADATA_TYPES, "allowed")
    result = ckptspec.validate(checkpoint, spec=_spec())
    assert (result.format, result.passed) == ("lightning", True), [finding.message for finding in result.findings]


def test_a_pattern_over_omegaconf_is_refused_because_it_would_admit_its_gadgets():
    with pytest.raises(ValueError, match="'omegaconf.\\*' is a pattern"):
        _spec("omegaconf.*")
    with pytest.raises(ValueError, match="omegaconf._utils"):
        _spec("omegaconf._utils._ensure_container")
