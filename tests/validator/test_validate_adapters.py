"""Manifests written at save time by the ckptspec adapters validate clean against full specs, and
damage to what only they record (RNG state, fingerprint) is caught."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from .conftest import HERE, copy_checkpoint, run_cli

from ckptspec.formats.tfbundle import open_bundle
from ckptspec.formats.torchzip import open_torch_checkpoint
from ckptspec import validate

FULL_TF_SPEC = """\
ckptspec: "1.0"
kind: spec
name: full-keras
framework: tensorflow
components:
  scheduler: {require: optional}
  rng: {require: required, generators: [tensorflow]}
"""


@pytest.fixture(scope="session")
def full_lightning_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter spec `ckptspec init` writes: every component required but scheduler, scaler, EMA."""
    path = tmp_path_factory.mktemp("full-spec") / "spec.yaml"
    code, out, _ = run_cli("init", "--name", "full", "--framework", "lightning")
    assert code == 0
    path.write_text(out)
    return path


@pytest.fixture(scope="session")
def adapter_lightning_checkpoint(tmp_path_factory: pytest.TempPathFactory, full_lightning_spec: Path) -> Path:
    pytest.importorskip("pytorch_lightning")
    from ._lightning_training import fit

    from ckptspec.lightning import CkptspecCallback

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    callback = CkptspecCallback(spec=full_lightning_spec, fingerprint_batch=torch.randn(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit(tmp_path_factory.mktemp("adapter-lightning"), callbacks=[callback])


@pytest.fixture(scope="session")
def adapter_tf_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("adapter-tf")
    spec = out / "spec.yaml"
    spec.write_text(FULL_TF_SPEC)
    subprocess.run([sys.executable, str(HERE / "_tf_adapter_training.py"), str(out / "run"), str(spec)], check=True, capture_output=True)
    return out / "run"


def test_lightning_adapter_manifest_validates_clean(adapter_lightning_checkpoint: Path) -> None:
    code, out, _ = run_cli("validate", adapter_lightning_checkpoint)
    assert (code, out.splitlines()[0]) == (0, f"{adapter_lightning_checkpoint}: ok (lightning, spec full)")


def test_tf_adapter_manifests_validate_clean(adapter_tf_directory: Path) -> None:
    code, out, _ = run_cli("audit", adapter_tf_directory)
    assert code == 0, out
    assert out.endswith("2 checkpoints: 2 passed, 0 failed; 0 errors, 0 warnings\n")


def test_rng_state_dropped_from_an_adapter_checkpoint(adapter_lightning_checkpoint: Path, tmp_path: Path) -> None:
    path = copy_checkpoint(adapter_lightning_checkpoint, tmp_path)
    checkpoint = torch.load(path, weights_only=False)
    del checkpoint["callbacks"]["CkptspecCallback"]["rng"]["numpy"]
    torch.save(checkpoint, path)
    missing = [f for f in validate(path).findings if f.code == "CKS102"]
    assert [f.pointer for f in missing] == ["/callbacks/CkptspecCallback/rng/numpy"]


def test_fingerprint_output_changed(adapter_lightning_checkpoint: Path, tmp_path: Path) -> None:
    path = copy_checkpoint(adapter_lightning_checkpoint, tmp_path)
    with open_torch_checkpoint(path) as checkpoint:
        start, _ = checkpoint.resolve("/callbacks/CkptspecCallback/fingerprint/outputs/output").byte_range
    data = bytearray(path.read_bytes())
    data[start] ^= 0x01
    path.write_bytes(data)
    (finding,) = [f for f in validate(path).findings if f.code == "CKS316"]
    assert finding.pointer == "/callbacks/CkptspecCallback/fingerprint/outputs/output"


def test_tf_fingerprint_output_changed(adapter_tf_directory: Path, tmp_path: Path) -> None:
    prefix = copy_checkpoint(adapter_tf_directory / "ckpt-2", tmp_path)
    bundle = open_bundle(prefix)
    (key,) = [key for key in bundle.entries if key.startswith("fingerprint/outputs/")]
    entry = bundle.entries[key]
    shard = bundle.shard_path(entry.shard_id)
    data = bytearray(shard.read_bytes())
    data[entry.offset] ^= 0x01
    shard.write_bytes(data)
    findings = validate(prefix).findings
    pointer = entry.pointer
    assert {(f.code, f.pointer) for f in findings if f.code in ("CKS209", "CKS316")} == {("CKS209", pointer), ("CKS316", pointer)}


def test_truncated_tf_shard_leaves_the_fingerprint_unchecked(adapter_tf_directory: Path, tmp_path: Path) -> None:
    path = copy_checkpoint(adapter_tf_directory / "ckpt-2", tmp_path)
    shard = Path(f"{path}.data-00000-of-00001")
    os.truncate(shard, 10)
    result = validate(path)
    assert "CKS009" not in {f.code for f in result.findings}
    unchecked = [f for f in result.findings if f.code == "CKS010" and f.message.startswith("CKS316")]
    assert [f.pointer for f in unchecked] == [
        "/fingerprint~1inputs~10~1.ATTRIBUTES~1VARIABLE_VALUE",
        "/fingerprint~1outputs~10~1.ATTRIBUTES~1VARIABLE_VALUE",
    ]
    assert unchecked[0].message.startswith(
        f"CKS316 fingerprint-digest-mismatch not checked: {shard}: fingerprint/inputs/0/.ATTRIBUTES/VARIABLE_VALUE: "
    )
