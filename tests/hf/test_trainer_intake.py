"""A Trainer output directory read without torch's loader: each `checkpoint-N/` one checkpoint with
its training state classified, not feared; damage named to the file and tensor."""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import audit, validate
from ckptspec.adopt import adopt
from ckptspec.cli import cli
from ckptspec.formats.detect import detect
from ckptspec.formats.inspect import inspect_checkpoint

from .._payloads import judged_dangerous, plant

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

STEPS = (4, 8, 12)


def run_cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.output


@pytest.fixture()
def run(trainer_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trainer_run, copy)
    return copy


def flip_in_largest_record(path: Path) -> str:
    """Flip one bit in the middle of the largest tensor record of a torch zip; the record's name."""
    with zipfile.ZipFile(path) as archive:
        record = max((info for info in archive.infolist() if "/data/" in info.filename), key=lambda info: info.file_size)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26 : record.header_offset + 30])
    data[record.header_offset + 30 + name_length + extra_length + record.file_size // 2] ^= 1
    path.write_bytes(bytes(data))
    return record.filename


def test_a_trainer_checkpoint_is_one_checkpoint_with_its_components(trainer_run: Path) -> None:
    assert {child.name for child in trainer_run.iterdir()} == {f"checkpoint-{step}" for step in STEPS}
    found = detect(trainer_run / "checkpoint-8")
    assert found.kind == "hf-trainer"
    inspection = inspect_checkpoint(trainer_run / "checkpoint-8")
    assert inspection.components["model"] == "/model"
    assert {"optimizer", "scheduler", "rng", "config", "data_position"} <= inspection.components.keys()
    assert inspection.metadata["global_step"] == 8 and inspection.metadata["train_batch_size"] == 4
    model_tensors = [tensor for tensor in inspection.tensors if tensor.component == "model"]
    assert "/model/classifier.weight" in {tensor.key for tensor in model_tensors}
    code, output = run_cli("inspect", trainer_run / "checkpoint-8")
    assert code == 0, output
    assert "hf-trainer" in output and "framework-record" in output and "dangerous" not in output


def test_audit_finds_each_checkpoint_directory_once_and_fears_none_of_it(trainer_run: Path) -> None:
    report = audit([trainer_run])
    assert sorted(Path(result.checkpoint).name for result in report.results) == sorted(f"checkpoint-{step}" for step in STEPS)
    assert {result.format for result in report.results} == {"hf-trainer"}
    codes = {finding.code for finding in report.findings}
    assert "CKS401" not in codes
    records = [finding for finding in report.findings if finding.code == "CKS416"]
    assert len(records) == len(STEPS) and all(Path(finding.file).name == "training_args.bin" for finding in records)
    assert "transformers.training_args.TrainingArguments" in records[0].message
    assert records[0].severity == "info"


def test_an_adopted_checkpoint_validates_inside_its_directory_and_where_it_is_moved(run: Path, tmp_path: Path) -> None:
    checkpoint = run / "checkpoint-8"
    manifest = adopt(checkpoint)
    assert manifest == checkpoint / ".ckptspec.yaml"
    text = manifest.read_text()
    assert "format: hf-trainer" in text and "checkpoint: ." in text and "global_step: 8" in text
    assert "layer_norm_eps" in text  # the construction config from config.json
    code, output = run_cli("validate", checkpoint)
    assert code == 0, output
    moved = tmp_path / "elsewhere" / "renamed"
    shutil.move(checkpoint, moved)
    assert validate(moved).passed
    shutil.rmtree(moved)  # what save_total_limit does: the manifest goes with its checkpoint
    assert not manifest.exists()


def test_a_flipped_byte_in_the_optimizer_is_named_to_its_tensor(run: Path) -> None:
    checkpoint = run / "checkpoint-12"
    adopt(checkpoint)
    flip_in_largest_record(checkpoint / "optimizer.pt")
    report = audit([run])
    damaged = [finding for finding in report.findings if finding.code == "CKS209"]
    assert len(damaged) == 1
    assert damaged[0].file.endswith("checkpoint-12/optimizer.pt") and damaged[0].pointer.startswith("/optimizer/state/")
    failed = {Path(result.checkpoint).name: result for result in report.results if not result.passed}
    assert {finding.code for finding in failed["checkpoint-12"].findings} >= {"CKS209"}


def test_a_missing_optimizer_is_named_against_a_spec_that_requires_it(run: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        'ckptspec: "1.2"\nkind: spec\nname: trainer\ncomponents:\n  optimizer: {require: required}\n  scheduler: {require: required}\n'
        "  config: {require: optional}\n  fingerprint: {require: optional}\n"
    )
    checkpoint = run / "checkpoint-8"
    adopt(checkpoint)
    (checkpoint / "optimizer.pt").unlink()
    result = validate(checkpoint, spec=spec)
    assert not result.passed
    missing = [finding for finding in result.findings if "optimizer.pt" in finding.message]
    assert missing, [finding.message for finding in result.findings]


class _CallsTheArguments:
    """Pickles as `TrainingArguments(output_dir=...)` called: its __post_init__ would run."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return transformers.TrainingArguments, ("/tmp/elsewhere",)


class _NamesAnotherGlobal:
    """Pickles as a call of another function of the same module as the judged enums."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return transformers.trainer_utils.set_seed, (0,)


@pytest.mark.parametrize("payload", [_CallsTheArguments(), _NamesAnotherGlobal()], ids=["arguments-called", "other-global"])
def test_a_payload_under_a_transformers_name_stays_dangerous(run: Path, payload: object) -> None:
    checkpoint = run / "checkpoint-8"
    torch.save({"args": payload}, checkpoint / "training_args.bin")
    report = audit([checkpoint])
    dangerous = [finding for finding in report.findings if finding.code == "CKS401"]
    assert dangerous and all(Path(finding.file).name == "training_args.bin" for finding in dangerous)
    assert not report.passed


def test_a_file_planted_beside_the_state_files_is_judged_on_its_own(run: Path, tmp_path: Path) -> None:
    checkpoint = run / "checkpoint-8"
    marker = tmp_path / "ran"
    planted = [checkpoint / "extra_state.pt", checkpoint / "plugins" / "hook.pkl"]
    plant(planted, marker)
    os.mkfifo(checkpoint / "notes.pt")
    report = audit([run])
    by_file = {Path(result.checkpoint): result for result in report.results}
    assert all(judged_dangerous(report, path) for path in planted)
    assert any(finding.code == "CKS001" and "FIFO" in finding.message for finding in by_file[checkpoint / "notes.pt"].findings)
    assert by_file[checkpoint].format == "hf-trainer"  # the checkpoint itself is still one, of what the Trainer wrote
    assert not report.passed and not marker.exists()


def test_the_arguments_pickled_by_hand_as_the_trainer_does_stay_a_record(run: Path) -> None:
    args = torch.load(run / "checkpoint-8" / "training_args.bin", weights_only=False)
    (run / "checkpoint-8" / "training_args.bin").write_bytes(pickle.dumps(args, protocol=2))
    report = audit([run / "checkpoint-8"])
    assert "CKS401" not in {finding.code for finding in report.findings}
    assert "CKS416" in {finding.code for finding in report.findings}


class _RunsACommand:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return os.system, ("true",)


def _truncated_state(checkpoint: Path) -> None:
    (checkpoint / "trainer_state.json").write_text('{"global_step": 8,')


def _deep_state(checkpoint: Path) -> None:
    (checkpoint / "trainer_state.json").write_text("[" * 100_000 + "]" * 100_000)


def _no_model(checkpoint: Path) -> None:
    (checkpoint / "model.safetensors").unlink()


def _pickle_for_generators(checkpoint: Path) -> None:
    (checkpoint / "rng_state.pth").write_bytes(pickle.dumps(_RunsACommand()))


@pytest.mark.parametrize(
    ("damage", "code", "named"),
    [
        (_truncated_state, "CKS211", "trainer_state.json: not valid JSON"),
        (_deep_state, "CKS211", "trainer_state.json: not valid JSON: nested too deeply"),
        (_no_model, "CKS211", "no model weights"),
        (_pickle_for_generators, "CKS401", "posix.system"),
    ],
    ids=["truncated-state", "deep-state", "no-model", "pickle-for-generators"],
)
def test_a_damaged_or_hostile_checkpoint_is_named_without_a_traceback(run: Path, damage: object, code: str, named: str) -> None:
    checkpoint = run / "checkpoint-8"
    damage(checkpoint)  # type: ignore[operator]
    result = validate(checkpoint)
    assert not result.passed
    assert any(finding.code == code and named in finding.message for finding in result.findings), [f.message for f in result.findings]


def _sharded(checkpoint: Path) -> None:
    from ._tiny import model

    (checkpoint / "model.safetensors").unlink()
    model().save_pretrained(checkpoint, max_shard_size="20KB")


def _legacy(checkpoint: Path) -> None:
    from ._tiny import model

    (checkpoint / "model.safetensors").unlink()
    torch.save(model().state_dict(), checkpoint / "pytorch_model.bin")


@pytest.mark.parametrize("rewrite", [_sharded, _legacy], ids=["sharded-index", "legacy-bin"])
def test_the_model_is_read_from_each_layout_the_trainer_writes(run: Path, rewrite: object) -> None:
    checkpoint = run / "checkpoint-8"
    rewrite(checkpoint)  # type: ignore[operator]
    inspection = inspect_checkpoint(checkpoint)
    model_tensors = {tensor.key for tensor in inspection.tensors if tensor.component == "model"}
    assert "/model/classifier.weight" in model_tensors or "/pytorch_model/classifier.weight" in model_tensors
    assert len(model_tensors) == 25
    adopt(checkpoint)
    assert validate(checkpoint).passed


def test_diff_takes_two_checkpoint_directories(trainer_run: Path) -> None:
    code, output = run_cli("diff", trainer_run / "checkpoint-4", trainer_run / "checkpoint-8")
    assert "~ model:classifier.weight" in output and "optimizer" in output, output
