"""TorchScript archives written by `torch.jit.save`: tensors as `torch.jit.load` has them, pickles
judged, the program reported as code and its changes caught."""

from __future__ import annotations

import pickle
import shutil
import zipfile
from pathlib import Path

import crc32c
import pytest
import torch

from ckptspec._views.open import open_view
from ckptspec.formats._zip_records import ZipArchive
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.torchscript import open_torchscript

from .._payloads import SystemCall
from ..torch_reader._torch_corpus import rewrite_archive, tensor_bytes
from ._cli import WEIGHTS_SPEC, run


@pytest.mark.parametrize("name", ["scripted.pt", "traced.pt"])
def test_model_tensors_equal_the_loaded_modules_state(torchscript_corpus: dict[str, Path], name: str) -> None:
    path = torchscript_corpus[name]
    theirs = torch.jit.load(path).state_dict()
    with open_torchscript(path) as archive:
        ours = archive.tree["model"]
        assert list(ours) == list(theirs)
        for key, tensor in theirs.items():
            ref = ours[key]
            assert (ref.dtype, ref.shape, ref.stride) == (str(tensor.dtype)[6:], tuple(tensor.shape), tuple(tensor.stride())), key
            assert ref.crc32c() == crc32c.crc32c(tensor_bytes(tensor)), key
        assert bool(archive.tree["constants"]) == (name == "traced.pt"), "tracing folds `torch.ones(2) * 3` into a constant"
        assert all(g.safety == "allowed" for g in archive.globals), archive.globals
        assert archive.root_class is not None and archive.root_class.startswith("__torch__.")
        assert archive.verify() == []


def test_detected_inspected_and_program_listed(torchscript_corpus: dict[str, Path]) -> None:
    path = torchscript_corpus["scripted.pt"]
    assert detect(path).kind == "torchscript"
    inspection = inspect_checkpoint(path)
    assert (inspection.format, inspection.components) == ("torchscript", {"model": "/model"})
    with zipfile.ZipFile(path) as archive, open_torchscript(path) as ours:
        code = sorted(name.split("/", 1)[1] for name in archive.namelist() if "/code/" in name)
        assert ours.program.files == code
        assert inspection.metadata["code_files"] == len(code)


def test_a_script_class_without_its_source_is_dangerous(torchscript_corpus: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(torchscript_corpus["scripted.pt"]) as archive:
        # torch mangles the module (`linear.___torch_mangle_0`) when the class was scripted before in the process
        dropped = tuple(name.split("/", 1)[1] for name in archive.namelist() if "/modules/linear" in name and name.endswith(".py"))
    path = rewrite_archive(torchscript_corpus["scripted.pt"], tmp_path / "no-source.pt", drop=dropped)
    with open_torchscript(path) as archive:
        dangerous = [g.qualname for g in archive.globals if g.safety == "dangerous"]
        assert dangerous and all(name.startswith("__torch__.torch.nn.modules.linear.") and name.endswith(".Linear") for name in dangerous)


@pytest.mark.parametrize("record", ["data.pkl", "constants.pkl", "traced_inputs.pkl"])
def test_a_payload_in_any_pickle_is_dangerous(torchscript_corpus: dict[str, Path], tmp_path: Path, record: str) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps(SystemCall(f"touch {marker}"), protocol=2)
    path = rewrite_archive(torchscript_corpus["traced.pt"], tmp_path / "hostile.pt", replace={record: payload})
    code, output = run("validate", path)
    assert code == 1 and "CKS401" in output and "system" in output, output
    assert not marker.exists()


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damage_is_named_to_the_tensor_or_the_code_record(torchscript_corpus: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copy(torchscript_corpus["scripted.pt"], tmp_path / "damaged.pt")
    with open_torchscript(path) as archive:
        start, _ = archive.tree["model"]["linear.weight"].byte_range
        code = next(r for name, r in ZipArchive(path).records.items() if name.endswith("_corpus.py"))
    _flip(Path(path), start)
    _flip(Path(path), code.offset + code.size // 2)
    with open_view(Path(path)) as view:
        problems = {(p.pointer, p.message.split(":")[0]) for p in view.problems}
    assert "/model/linear.weight" in {pointer for pointer, _ in problems}, problems
    assert any(message.endswith("_corpus.py") for _, message in problems), problems


def test_manifest_records_the_program_and_validate_catches_a_new_one(torchscript_corpus: dict[str, Path], tmp_path: Path) -> None:
    spec = tmp_path / "weights.yaml"
    spec.write_text(WEIGHTS_SPEC)
    path = Path(shutil.copy(torchscript_corpus["scripted.pt"], tmp_path / "model.pt"))
    assert run("manifest", path, "--spec", spec)[0] == 0
    code, output = run("validate", path)
    assert code == 0 and "CKS415" in output, output
    with zipfile.ZipFile(path) as archive:
        source = next(name for name in archive.namelist() if name.endswith("_corpus.py"))
        edited = archive.read(source).replace(b"3", b"4")
    rewritten = rewrite_archive(path, tmp_path / "edited.pt", replace={source.split("/", 1)[1]: edited}, compress=(source.split("/", 1)[1],))
    shutil.move(rewritten, path)
    code, output = run("validate", path)
    assert code == 1 and "CKS223" in output and "program sha256" in output, output


def test_diff_with_the_state_dict_shows_only_the_program(torchscript_corpus: dict[str, Path]) -> None:
    code, output = run("diff", torchscript_corpus["state_dict.pth"], torchscript_corpus["scripted.pt"])
    assert code == 1, output
    assert "program:" in output and "tensors:" not in output, output
