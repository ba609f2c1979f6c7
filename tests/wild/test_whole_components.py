"""A file that holds one component whole (a Trainer's optimizer.pt, a quantized model's state dict)
is read as that component: inspection names it, adoption records it, and a spec that requires it
finds it, instead of reporting it missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptspec import load_manifest, validate
from ckptspec.adopt import adopt
from ckptspec.formats.torchzip import inspect_torch_checkpoint

from .conftest import run_cli

WHOLE = {"optimizer.pt": "optimizer", "scheduler.pt": "scheduler", "scaler.pt": "scaler", "rng_state.pth": "rng", "pytorch_model.bin": "model"}


@pytest.fixture(scope="module")
def adopted(trainer_checkpoint: Path, odd_state_dicts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of every file, each with the manifest adoption wrote for it."""
    directory = tmp_path_factory.mktemp("adopted")
    files = {**{name: trainer_checkpoint / name for name in WHOLE}, **{f"{k}.pt": v for k, v in odd_state_dicts.items()}}
    copies = {}
    for name, path in files.items():
        copies[name] = directory / name
        copies[name].write_bytes(path.read_bytes())
        adopt(copies[name])
    return copies


@pytest.fixture(scope="module")
def starter_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    assert run_cli("init", "--framework", "torch", "-o", path)[0] == 0
    return path


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_inspection_names_the_component_the_file_is(trainer_checkpoint: Path, name: str) -> None:
    inspection = inspect_torch_checkpoint(trainer_checkpoint / name)
    assert inspection.components == {WHOLE[name]: ""}


@pytest.mark.parametrize("name", ["quantized", "sparse"])
def test_state_dicts_with_packed_or_sparse_entries_are_models(odd_state_dicts: dict[str, Path], name: str) -> None:
    inspection = inspect_torch_checkpoint(odd_state_dicts[name])
    assert inspection.components == {"model": ""}
    assert all(tensor.component == "model" for tensor in inspection.tensors)


def test_adoption_records_each_component(adopted: dict[str, Path]) -> None:
    parts = {name: load_manifest(f"{path}.ckptspec.yaml").components for name, path in adopted.items()}
    assert [(o.at, o.state_tensor_count > 0) for o in parts["optimizer.pt"].optimizer or []] == [("", True)]
    assert [(s.at, s.step) for s in parts["scheduler.pt"].scheduler or []] == [("", 1)]
    assert parts["scaler.pt"].scaler is not None and parts["scaler.pt"].scaler.at == ""
    rng = parts["rng_state.pth"].rng
    assert rng is not None and [(g.name, g.at) for g in rng.generators] == [("python", "/python"), ("numpy", "/numpy"), ("torch", "/cpu")]
    for name in ("quantized.pt", "sparse.pt", "pytorch_model.bin"):
        model = parts[name].model
        assert model is not None and model.at == "" and model.tensors


def test_adopted_files_validate_unchanged(adopted: dict[str, Path]) -> None:
    for name, path in adopted.items():
        result = validate(path)
        assert [(f.code, f.severity) for f in result.findings] == [("CKS004", "warning")], name


def test_the_spec_finds_what_each_file_holds(adopted: dict[str, Path], starter_spec: Path) -> None:
    """The starter spec asks for a whole training state; each file lacks the others' parts, never its own."""
    for name, path in adopted.items():
        missing = {f.path[1] for f in validate(path, starter_spec).findings if f.code == "CKS101"}
        assert missing and WHOLE.get(name, "model") not in missing, (name, missing)
