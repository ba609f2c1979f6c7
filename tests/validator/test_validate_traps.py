"""Each damage done to a real checkpoint or its manifest is caught: exit 1, naming the rule and the
exact tensor, key or file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from .._payloads import SystemCall
from .conftest import run_cli

from ckptspec.formats.torchzip import open_torch_checkpoint
from ckptspec import Result, validate
from ckptspec.checks.files import leftovers_of

Copy = Callable[[Path], Path]


def _codes(result: Result) -> set[str]:
    return {finding.code for finding in result.findings}


def _finding(result: Result, code: str) -> tuple[str | None, str]:
    (finding,) = [f for f in result.findings if f.code == code]
    return finding.pointer, finding.message


def _resave(path: Path, edit: Callable[[dict], None]) -> None:
    checkpoint = torch.load(path, weights_only=False)
    edit(checkpoint)
    torch.save(checkpoint, path)


def _edit_manifest(path: Path, old: str, new: str) -> None:
    manifest = Path(f"{path}.ckptspec.yaml")
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new, 1))


def test_flipped_tensor_byte_names_the_tensor(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    with open_torch_checkpoint(path) as checkpoint:
        start, _ = checkpoint.resolve("/state_dict/net.2.weight").byte_range
    data = bytearray(path.read_bytes())
    data[start + 1] ^= 0x01
    path.write_bytes(data)
    code, out, _ = run_cli("validate", path)
    assert code == 1
    assert "CKS207 [error] tensor-checksum-mismatch /state_dict/net.2.weight: crc32c" in out
    assert "CKS203 [error] file-digest-mismatch" in out


def test_scheduler_dropped_from_lightning_checkpoint(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    _resave(path, lambda checkpoint: checkpoint.update(lr_schedulers=[]))
    result = validate(path)
    assert result.exit_code == 1
    assert _finding(result, "CKS102")[0] == "/lr_schedulers/0"
    assert _finding(result, "CKS107") == ("/lr_schedulers", "the Lightning checkpoint's lr_schedulers is empty or absent")


def test_removed_optimizer_state_is_counted(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    _resave(path, lambda checkpoint: checkpoint["optimizer_states"][0]["state"].pop(0))
    result = validate(path)
    assert result.exit_code == 1
    pointer, message = _finding(result, "CKS306")
    assert pointer == "/optimizer_states/0/state"
    # Adam keeps step, exp_avg and exp_avg_sq for each of the model's 6 parameters; one is gone.
    assert message == "/optimizer_states/0/state: 15 state tensors in the file, 18 recorded"


def test_optimizer_states_removed_entirely(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    _resave(path, lambda checkpoint: checkpoint.pop("optimizer_states"))
    result = validate(path)
    assert {"CKS102", "CKS106", "CKS202"} <= _codes(result)
    assert _finding(result, "CKS106")[0] == "/optimizer_states"


def test_manifest_edited_to_another_eps(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    _edit_manifest(path, "eps: 1.0e-08", "eps: 1.0e-06")
    result = validate(path)
    assert _codes(result) == {"CKS304"}
    assert _finding(result, "CKS304") == (
        "/optimizer_states/0/param_groups/0/eps",
        "/optimizer_states/0/param_groups/0/eps: 1e-08 in the file, 1e-06 recorded",
    )


def test_manifest_edited_to_another_tensor_shape(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    manifest = Path(f"{path}.ckptspec.yaml")
    lines = manifest.read_text().splitlines()
    # Keras 3 saves the model's weights under the optimizer's `_trainable_variables`.
    at = lines.index("    - name: optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE")
    assert lines[at + 2 : at + 5] == ["      shape:", "      - 3", "      - 4"]
    lines[at + 4] = "      - 5"
    manifest.write_text("\n".join(lines) + "\n")
    result = validate(path)
    pointer, message = _finding(result, "CKS206")
    assert pointer == "/optimizer~1_trainable_variables~10~1.ATTRIBUTES~1VARIABLE_VALUE"
    assert message.endswith("shape [3, 4] in the file, [3, 5] recorded")


def test_truncated_file(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size // 2)
    code, out, _ = run_cli("validate", path)
    assert code == 1
    assert f"CKS202 [error] file-size-mismatch files[0].size: {path.name}: {size // 2} bytes on disk, {size} recorded" in out
    assert "CKS001 [error] checkpoint-unreadable" in out


def test_deleted_shard_of_a_sharded_bundle(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["sharded"])
    Path(f"{path}.data-00001-of-00005").unlink()
    result = validate(path)
    assert result.exit_code == 1
    missing = [f for f in result.findings if f.code == "CKS201"]
    assert [f.file for f in missing] == [f"{path}.data-00001-of-00005"]
    assert any(f.code == "CKS210" and "data shard 1 of 5 is missing" in f.message for f in result.findings)


def test_flipped_byte_in_a_tf_shard_names_the_key(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    shard = Path(f"{path}.data-00000-of-00001")
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x10
    shard.write_bytes(data)
    result = validate(path)
    stored = [f for f in result.findings if f.code == "CKS209"]
    assert len(stored) == 1 and stored[0].pointer is not None and stored[0].file == str(shard)
    assert "CKS203" in _codes(result)


def test_truncated_tf_shard_is_damage_not_missing_optimizer_state(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    shard = Path(f"{path}.data-00000-of-00001")
    os.truncate(shard, 100)
    result = validate(path)
    assert _codes(result) == {"CKS010", "CKS202", "CKS211"}
    assert {f.file for f in result.findings if f.code == "CKS211"} == {str(shard)}
    reason = "the object graph (_CHECKPOINTABLE_OBJECT_GRAPH) cannot be read, so which variables belong to the optimizer is unknown"
    assert sorted(f.message for f in result.findings if f.code == "CKS010") == [
        f"CKS106 optimizer-state-absent not checked: {reason}",
        f"CKS304 optimizer-hyperparameter-mismatch not checked: {reason}",
        f"CKS306 optimizer-state-count-mismatch not checked: {reason}",
        f"CKS314 data-position-mismatch not checked: no tensor of the bundle is known to hold the global_step; {reason}",
    ]


def test_missing_index_is_an_interrupted_save(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    Path(f"{path}.index").unlink()
    result = validate(f"{path}.data-00000-of-00001")
    assert {"CKS212", "CKS201"} <= _codes(result)


def test_leftover_temp_file_is_a_warning(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    Path(f"{path}.index.tempstate12345").write_bytes(b"partial")
    result = validate(path)
    assert (result.exit_code, _codes(result)) == (0, {"CKS213"})


def test_malicious_pickle_global_is_found_not_run(lightning_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    path = copy_of(lightning_checkpoint)
    _resave(path, lambda checkpoint: checkpoint["callbacks"].update(evil=SystemCall(f"touch {marker}")))
    result = validate(path)
    assert not marker.exists()
    (finding,) = [f for f in result.findings if f.code == "CKS401"]
    assert finding.message == f"pickle names {os.system.__module__}.system (1×), which is not on the allow-list: loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)"
    assert finding.file == str(path)


def test_global_step_edited_in_the_file(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    _resave(path, lambda checkpoint: checkpoint.update(global_step=99))
    result = validate(path)
    assert _finding(result, "CKS302") == ("/global_step", "global_step is 99, but the fit loop recorded 8 optimizer steps "
                                          "(epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed)")
    assert _finding(result, "CKS314")[0] == "/global_step"


def test_manifest_path_escaping_its_directory(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    _edit_manifest(path, "- path: model.pt", "- path: ../../etc/passwd")
    result = validate(path)
    assert _finding(result, "CKS403")[1].startswith("../../etc/passwd: leaves the manifest's directory")


def test_symlink_pointing_outside(torch_checkpoint: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = outside / "model.pt"
    target.write_bytes(torch_checkpoint.read_bytes())
    inside = tmp_path / "registry"
    inside.mkdir()
    (inside / "model.pt").symlink_to(target)
    Path(f"{inside / 'model.pt'}.ckptspec.yaml").write_text(Path(f"{torch_checkpoint}.ckptspec.yaml").read_text())
    result = validate(inside / "model.pt")
    assert _codes(result) == {"CKS404"}


def test_manifest_linked_out_of_its_directory_is_not_read(torch_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    path = copy_of(torch_checkpoint)
    manifest = Path(f"{path}.ckptspec.yaml")
    manifest.unlink()
    manifest.symlink_to("/etc/passwd")
    result = validate(path)
    assert _codes(result) == {"CKS404", "CKS004"}
    (escape,) = [f for f in result.findings if f.code == "CKS404"]
    assert (escape.file, escape.message) == (
        str(manifest),
        f"{manifest.name}: links to /etc/passwd, outside {path.parent.resolve()}; the manifest was not read",
    )


def test_scheduler_step_edited_in_the_manifest(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    _edit_manifest(path, "step: 2", "step: 7")
    result = validate(path)
    assert _finding(result, "CKS310") == ("/scheduler", "/scheduler: step 2 in the file, 7 recorded")


def test_required_rng_missing_from_an_adopted_lightning_checkpoint(lightning_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    strict = tmp_path / "strict.yaml"
    strict.write_text('ckptspec: "1.0"\nkind: spec\nname: strict\n')
    code, out, _ = run_cli("validate", copy_of(lightning_checkpoint), "--spec", strict)
    assert code == 1
    assert "CKS101 [error] required-component-not-recorded components.rng: spec 'strict' requires RNG state; the manifest lists it as unknown (rng)" in out
    assert "CKS006 [warning] spec-differs" in out


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all\n" * 10, bytes(range(256))])
def test_garbage_input_cannot_run(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.ckpt"
    path.write_bytes(content)
    code, out, err = run_cli("validate", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}: ") and "\n" == err[-1] and err.count("\n") == 1


def test_missing_path_cannot_run(tmp_path: Path) -> None:
    code, _, err = run_cli("validate", tmp_path / "nope.ckpt")
    assert (code, err) == (2, f"error: {tmp_path / 'nope.ckpt'}: no such file, directory or TensorFlow checkpoint prefix\n")


def test_checkpoint_without_manifest_is_a_finding(lightning_checkpoint: Path, tmp_path: Path) -> None:
    path = tmp_path / "bare.ckpt"
    path.write_bytes(lightning_checkpoint.read_bytes())
    result = validate(path)
    assert _codes(result) == {"CKS002", "CKS004"}


def test_tf_bundle_without_optimizer_state(tf_checkpoints: dict[str, Path]) -> None:
    result = validate(tf_checkpoints["model_only"])
    assert {"CKS101", "CKS106"} <= _codes(result)
    assert _finding(result, "CKS106")[1] == "the bundle holds no optimizer variables or slots (was the optimizer tracked by the Checkpoint?)"


def test_leftovers_of_a_name_with_glob_characters(tmp_path: Path) -> None:
    checkpoint = tmp_path / "run[1].ckpt"
    checkpoint.write_bytes(b"")
    own = tmp_path / ".run[1].ckpt.0123456789ab.tmp"
    own.write_bytes(b"partial")
    (tmp_path / "run1.ckpt.tmp").write_bytes(b"another run's")
    assert leftovers_of(checkpoint) == [own]
