"""A complete save → restore continues bit for bit; the manifest records what the issue lists."""

from __future__ import annotations

import re

import random
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")
numpy = pytest.importorskip("numpy")
crc32c = pytest.importorskip("crc32c")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import AdapterError, RestoreError, Spec, load_manifest, manifest_path_for  # noqa: E402

from ._tiny import Net, seed_everything, train_step  # noqa: E402


class ShadowWeights(torch.nn.Module):
    """A hand-written EMA: a copy of the model's weights moved towards them after each step."""

    def __init__(self, model: torch.nn.Module, decay: float = 0.9) -> None:
        super().__init__()
        self.decay = decay
        self.shadow = Net()
        self.shadow.load_state_dict(model.state_dict())
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        for mine, theirs in zip(self.shadow.parameters(), model.parameters()):
            mine.lerp_(theirs, 1 - self.decay)
        self.updates += 1


def _ema(kind: str, model: Net) -> torch.nn.Module:
    if kind == "averaged":
        return torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    return ShadowWeights(model)


def _update(ema: torch.nn.Module, model: Net) -> None:
    if isinstance(ema, torch.optim.swa_utils.AveragedModel):
        ema.update_parameters(model)
    else:
        ema.update(model)


class _Run:
    """Model, Adam, cosine schedule, GradScaler and an EMA: every component a complete checkpoint holds."""

    def __init__(self, ema_kind: str) -> None:
        self.model = Net()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=20)
        self.scaler = torch.amp.GradScaler("cpu")
        self.ema = _ema(ema_kind, self.model)
        self.position = ckpt.DataPosition(sampler_seed=7)

    def steps(self, count: int) -> None:
        for _ in range(count):
            train_step(self.model, self.optimizer, self.scheduler)
            _update(self.ema, self.model)
            self.position.global_step += 1

    def components(self) -> dict:
        return {"optimizer": self.optimizer, "scheduler": self.scheduler, "scaler": self.scaler, "ema": self.ema, "data_position": self.position}


@pytest.mark.parametrize("ema_kind", ["averaged", "shadow"])
def test_complete_resume_is_bit_identical_to_the_uninterrupted_run(tmp_path, fixed_batch, ema_kind):
    seed_everything(0)
    uninterrupted = _Run(ema_kind)
    uninterrupted.steps(12)

    seed_everything(0)
    interrupted = _Run(ema_kind)
    interrupted.steps(6)
    spec = Spec.model_validate({"name": "complete", "components": {c: {"require": "required"} for c in ("scheduler", "scaler", "ema")}})
    ckpt.save(tmp_path / "run.pt", model=interrupted.model, fingerprint_batch=fixed_batch, spec=spec, **interrupted.components())

    seed_everything(123)  # a new process would start elsewhere
    resumed = _Run(ema_kind)
    report = ckpt.restore(tmp_path / "run.pt", model=resumed.model, **resumed.components())
    resumed.steps(6)

    assert set(report.restored) == {"model", "optimizer", "scheduler", "scaler", "ema", "rng", "data_position", "fingerprint"}
    assert report.tensors_loaded == report.tensors_saved and report.fingerprint_replayed is True
    for name, tensor in uninterrupted.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    for name, tensor in uninterrupted.ema.state_dict().items():
        assert torch.equal(tensor, resumed.ema.state_dict()[name]), name
    assert resumed.position.global_step == uninterrupted.position.global_step


def test_required_ema_not_given_to_restore_is_refused(tmp_path):
    seed_everything(0)
    run = _Run("averaged")
    spec = Spec.model_validate({"name": "ema", "components": {"ema": {"require": "required"}, "fingerprint": {"require": "optional"}}})
    ckpt.save(tmp_path / "run.pt", model=run.model, spec=spec, **run.components())
    fresh = _Run("averaged")
    components = fresh.components()
    del components["ema"]
    with pytest.raises(RestoreError, match="ema: the checkpoint holds one at /ema and spec 'ema' requires it to be restored"):
        ckpt.restore(tmp_path / "run.pt", model=fresh.model, **components)


def test_save_refuses_a_checkpoint_its_spec_would_reject(tmp_path):
    # The shared save-time message (`adapters._spec.unmet_components`), the same in all three adapters.
    with pytest.raises(AdapterError, match=re.escape("components.fingerprint is required, but none was given (pass fingerprint_batch=)")):
        ckpt.save(tmp_path / "x.pt", model=Net(), spec=Spec(name="defaults"), data_position=ckpt.DataPosition())
    assert not (tmp_path / "x.pt").exists()


class Scaled(torch.nn.Module):
    """A user module whose constants live only in plain attributes and `__constants__`."""

    __constants__ = ["mode"]

    def __init__(self) -> None:
        super().__init__()
        self.temperature = 0.5
        self.mode = "soft"
        self.conv = torch.nn.Conv1d(2, 4, kernel_size=3, stride=2, padding=1)
        self.norm = torch.nn.LayerNorm(4, eps=1e-6)
        self.gelu = torch.nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu(self.norm(self.conv(x).transpose(1, 2))) / self.temperature


def test_manifest_records_config_roles_crc_optimizer_and_rng(tmp_path):
    seed_everything(0)
    model = torch.nn.Sequential(Net(eps=1e-3), Scaled())
    model[0].head = torch.nn.Linear(8, 2).to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.8, 0.95))
    manifest = ckpt.save(tmp_path / "m.pt", model=model, optimizer=optimizer, hyperparameters={"width": 8})

    assert load_manifest(manifest_path_for(tmp_path / "m.pt")) == manifest
    constants = {module.path: module.constants for module in manifest.components.config.modules}
    assert constants["0.bn"] | {"eps": 1e-3, "momentum": 0.1, "affine": True, "track_running_stats": True} == constants["0.bn"]
    assert constants["0.drop"]["p"] == 0.1 and constants["0.act"]["negative_slope"] == 0.05
    assert constants["0.features"]["in_features"] == 4 and constants["0.features"]["bias"] is True
    assert constants["1"]["temperature"] == 0.5 and constants["1"]["mode"] == "soft"
    assert constants["1.conv"]["stride"] == [2] and constants["1.conv"]["padding"] == [1]
    assert constants["1.norm"]["normalized_shape"] == [4] and constants["1.norm"]["eps"] == 1e-6
    assert constants["1.gelu"]["approximate"] == "tanh"
    assert manifest.components.config.hyperparameters == {"width": 8}

    roles = {entry.name: entry.role for entry in manifest.components.model.tensors}
    assert roles["0.bn.num_batches_tracked"] == "buffer" and roles["0.bn.weight"] == "parameter"
    state = model.state_dict()
    with zipfile.ZipFile(tmp_path / "m.pt") as archive:
        records = sorted((name for name in archive.namelist() if "/data/" in name), key=lambda name: int(name.rsplit("/", 1)[1]))
        file_crcs = [f"{crc32c.crc32c(archive.read(name)):08x}" for name in records]
    # The model's tensors are pickled first, one storage each, so they are the file's first records.
    assert [entry.crc32c for entry in manifest.components.model.tensors] == file_crcs[: len(state)]
    assert [entry.dtype for entry in manifest.components.model.tensors if entry.name.startswith("0.head")] == ["bfloat16"] * 2

    (record,) = manifest.components.optimizer
    assert record.type == "torch.optim.adamw.AdamW"
    group = record.param_groups[0]
    assert group.hyperparameters["betas"] == [0.8, 0.95] and group.hyperparameters["lr"] == 3e-4
    assert [(ref.name, ref.shape) for ref in group.params] == [(name, list(p.shape)) for name, p in model.named_parameters()]
    assert {generator.name for generator in manifest.components.rng.generators} >= {"python", "numpy", "torch"}
    assert manifest.files[0].size == (tmp_path / "m.pt").stat().st_size


def test_rng_is_restored_for_every_generator(tmp_path):
    seed_everything(5)
    ckpt.save(tmp_path / "r.pt", model=Net())
    expected = (random.random(), float(numpy.random.rand()), torch.rand(1).item())
    seed_everything(99)
    ckpt.restore(tmp_path / "r.pt", model=Net())
    assert (random.random(), float(numpy.random.rand()), torch.rand(1).item()) == expected


def test_core_does_not_import_torch_and_the_adapter_names_the_extra():
    script = (
        "import sys; import ckptspec; assert 'torch' not in sys.modules, 'core imported torch'\n"
        "sys.modules['torch'] = None\n"
        "try:\n    import ckptspec.torch\nexcept ModuleNotFoundError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "pip install 'ckptspec[torch]'" in result.stdout
