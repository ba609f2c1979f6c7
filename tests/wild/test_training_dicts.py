"""A training script's own `torch.save` dict (timm's CheckpointSaver layout) is adopted with its EMA
weights, which validation then compares with the file, and with the script's `args` as its
hyper-parameters."""

from __future__ import annotations

import shutil
from pathlib import Path

from ckptspec import load_manifest, validate
from ckptspec.adopt import adopt


def test_ema_is_recorded_and_checked(timm_checkpoint: Path, tmp_path: Path) -> None:
    path = tmp_path / timm_checkpoint.name
    shutil.copyfile(timm_checkpoint, path)
    manifest_path = adopt(path)
    components = load_manifest(manifest_path).components
    assert components.ema is not None and components.ema.at == "/state_dict_ema"
    assert [t.name for t in components.ema.tensors] == [t.name for t in components.model.tensors]
    assert components.config is not None and components.config.hyperparameters == {"model": "tiny", "lr": 0.1, "epochs": 10}
    assert [f.code for f in validate(path).findings] == ["CKS004"]
    model_part, ema_part = manifest_path.read_text().split("\n  ema:\n")
    damaged = ema_part.replace(f"crc32c: {components.ema.tensors[0].crc32c}", "crc32c: deadbeef", 1)
    manifest_path.write_text(f"{model_part}\n  ema:\n{damaged}")
    assert [f.code for f in validate(path).findings if f.severity == "error"] == ["CKS207"]
