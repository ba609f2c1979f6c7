"""DeepSpeed checkpoints written by DeepSpeed itself (`engine.save_checkpoint`, ZeRO stages 0 to 3 and
bf16 on 2 ranks, see `_deepspeed_save`), read without torch or DeepSpeed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ckptspec import validate
from ckptspec._documents import load_manifest
from ckptspec._discover import discover
from ckptspec._validate import audit
from ckptspec._views.open import open_view
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats._names import DEEPSPEED_STATES_FILE

from .._payloads import judged_dangerous, plant
from ._deepspeed_save import SAVES, TAG, save_every_stage
from ._torchless import without_torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (the `deepspeed` extra, installed with DS_BUILD_OPS=0)",
)
RANKS = 2


@pytest.fixture(scope="session")
def saves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One save directory per entry of `SAVES`, each with `latest` and the tag."""
    root = tmp_path_factory.mktemp("deepspeed")
    mp.spawn(save_every_stage, args=(RANKS, str(root), str(root / "store")), nprocs=RANKS, join=True)
    return root


def _copy(saves: Path, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saves / name, tmp_path / name))


def _codes(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in validate(path).findings:
        found.setdefault(finding.code, []).append(f"{finding.pointer or ''} {finding.message}")
    return found


@pytest.mark.parametrize("name", SAVES)
def test_inspect_follows_latest_to_every_rank_file(saves: Path, name: str) -> None:
    stage, bf16 = SAVES[name]
    directory = saves / name
    on_disk = sorted(path.name for path in (directory / TAG).iterdir() if DEEPSPEED_STATES_FILE.match(path.name))
    inspection = inspect_checkpoint(directory)
    assert inspection.format == "deepspeed" and inspection.metadata["tag"] == TAG
    assert inspection.metadata["rank_files"] == on_disk
    optimizer_files = [file for file in on_disk if file.endswith("_optim_states.pt")]
    assert len(optimizer_files) == (RANKS if stage else 0)
    assert all(file.startswith("bf16_") == bf16 for file in optimizer_files)
    module = "zero_pp_rank_0_mp_rank_00_model_states" if stage == 3 else "mp_rank_00_model_states"
    assert any(tensor.key.startswith(f"/{module}/module/") for tensor in inspection.tensors)
    assert inspection.components["model"] == f"/{module}/module"
    assert inspection.components["optimizer"].startswith(f"/{optimizer_files[0][:-3]}/" if stage else f"/{module}/")
    assert all(ref.safety == "allowed" for ref in inspection.globals), inspection.globals


@pytest.mark.parametrize("name", SAVES)
def test_one_clean_checkpoint_per_save(saves: Path, name: str, tmp_path: Path) -> None:
    directory = _copy(saves, name, tmp_path)
    assert discover([tmp_path]).checkpoints == [directory]
    with open_view(directory) as view:
        assert view.format == "deepspeed" and view.problems == []
    assert set(_codes(directory)) == {"CKS002", "CKS004"}  # no manifest yet, no spec


_SPEC = """\
ckptspec: "1.0"
kind: spec
name: deepspeed-zero
framework: torch
components:
  model: {require: required}
  optimizer: {require: required}
  config: {require: optional}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
"""


def test_adopted_and_audited_without_torch(saves: Path, tmp_path: Path) -> None:
    """Each stage adopted torch-free records the module and one optimizer per file that holds one
    (the engine's without ZeRO, each rank's partition with it), and passes a spec requiring both."""
    directories = [_copy(saves, name, tmp_path / "saves") for name in SAVES]
    for directory in directories:
        adopted = without_torch("manifest", directory)
        assert adopted.returncode == 0, adopted.stderr
    spec = tmp_path / "spec.yaml"
    spec.write_text(_SPEC)
    audited = without_torch("audit", tmp_path / "saves", "--spec", spec, "--format", "json")
    results = json.loads(audited.stdout)["results"]
    assert sorted(Path(result["checkpoint"]).name for result in results) == sorted(d.name for d in directories)
    assert [f for result in results for f in result["findings"]] == [], audited.stdout
    for (stage, _), directory in zip(SAVES.values(), directories):
        components = load_manifest(directory.with_name(f"{directory.name}.ckptspec.yaml")).components
        assert components.model is not None and components.model.at.endswith("_model_states/module")
        assert len(components.optimizer or []) == (RANKS if stage else 1)


@pytest.mark.parametrize(
    ("save", "name", "kind"),
    [("zero2", "zero_pp_rank_1_mp_rank_00_optim_states.pt", "ZeRO optimizer"),
     ("bf16-zero1", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", "ZeRO optimizer"),
     ("zero3", "zero_pp_rank_1_mp_rank_00_model_states.pt", "ZeRO-3 model states"),
     ("zero1", "mp_rank_00_model_states.pt", "no *_model_states.pt")],
)  # fmt: skip
def test_deleted_rank_file(saves: Path, tmp_path: Path, save: str, name: str, kind: str) -> None:
    directory = _copy(saves, save, tmp_path)
    (directory / TAG / name).unlink()
    found = _codes(directory)["CKS244"]
    assert any(kind in message and ("ranks 1" in message or "model-parallel" not in message) for message in found), found


def test_rank_file_renamed_beyond_the_world_size(saves: Path, tmp_path: Path) -> None:
    directory = _copy(saves, "zero2", tmp_path)
    target = directory / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    target.rename(target.with_name("zero_pp_rank_7_mp_rank_00_optim_states.pt"))
    found = _codes(directory)["CKS244"]
    assert any("1 of 2" in message and message.endswith("ranks 1") for message in found), found


def test_latest_naming_a_missing_tag(saves: Path, tmp_path: Path) -> None:
    directory = _copy(saves, "zero2", tmp_path)
    shutil.rmtree(directory / TAG)
    found = _codes(directory)["CKS243"]
    assert any(TAG in message for message in found), found


def test_truncated_rank_file(saves: Path, tmp_path: Path) -> None:
    directory = _copy(saves, "zero3", tmp_path)
    target = directory / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    target.write_bytes(target.read_bytes()[:-200])
    found = _codes(directory)["CKS211"]
    assert any(target.name in message for message in found), found


def test_flipped_byte_names_the_rank_file_and_tensor(saves: Path, tmp_path: Path) -> None:
    directory = _copy(saves, "zero2", tmp_path)
    target = directory / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    with zipfile.ZipFile(target) as archive:
        record = max((info for info in archive.infolist() if "/data/" in info.filename), key=lambda info: info.file_size)
    data = bytearray(target.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", data, record.header_offset + 26)
    data[record.header_offset + 30 + name_length + extra_length + record.file_size // 2] ^= 0x40
    target.write_bytes(bytes(data))
    found = _codes(directory)["CKS209"]
    assert any(message.startswith(f"/{target.stem}/optimizer_state_dict/") for message in found), found


_ZERO_TO_FP32 = """
import json, sys
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
outcomes = {}
for directory in sys.argv[1:]:
    try:
        get_fp32_state_dict_from_zero_checkpoint(directory)
        outcomes[directory] = "converted"
    except Exception as exc:
        outcomes[directory] = f"{type(exc).__name__}: {exc}"
print(json.dumps(outcomes))
"""


def test_missing_files_agree_with_zero_to_fp32(saves: Path, tmp_path: Path) -> None:
    """DeepSpeed's own offline reader, `zero_to_fp32`, as the oracle: it converts every intact ZeRO
    save, and every save it cannot convert for a missing file is one ckptspec reports (CKS244)."""
    deletions = [("zero1", None), ("zero2", None), ("zero3", None), ("bf16-zero1", None),
                 ("zero2", "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                 ("bf16-zero1", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                 ("zero3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"), ("zero1", "mp_rank_00_model_states.pt"),
                 ("zero3", "zero_pp_rank_0_mp_rank_00_model_states.pt")]  # fmt: skip
    cases: dict[str, str | None] = {}
    for number, (save, name) in enumerate(deletions):
        directory = _copy(saves, save, tmp_path / str(number))
        if name is not None:
            (directory / TAG / name).unlink()
        cases[str(directory)] = name
    environment = {**os.environ, "DS_ACCELERATOR": "cpu"}
    run = subprocess.run([sys.executable, "-c", _ZERO_TO_FP32, *cases], capture_output=True, text=True, env=environment, timeout=300)
    outcomes = json.loads(run.stdout.splitlines()[-1])
    for directory, deleted in cases.items():
        flagged = "CKS244" in _codes(Path(directory))
        assert flagged == (deleted is not None), (directory, outcomes[directory])
        assert (outcomes[directory] == "converted") == (deleted is None) or flagged, (directory, outcomes[directory])



def test_a_pickle_planted_in_a_save_or_its_tag_is_judged_on_its_own(saves: Path, tmp_path: Path) -> None:
    directory = _copy(saves, "zero2", tmp_path / "saves")
    marker = tmp_path / "ran"
    planted = [directory / "extra_state.pkl", directory / TAG / "hook.pkl", directory / "plugins" / "hook.pkl"]
    plant(planted, marker)
    report = audit([tmp_path / "saves"], jobs=1)
    assert {Path(result.checkpoint): result.format for result in report.results}[directory] == "deepspeed"
    assert all(judged_dangerous(report, path) for path in planted)
    assert len(report.results) == 1 + len(planted) and not marker.exists()
