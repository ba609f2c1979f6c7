"""The command line on Keras files: manifest, validate, diff and inspect, exit codes and messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from ckptspec.cli import cli
from ckptspec.formats.keras import open_keras

from .keras_written import KerasRun


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


def _flip(path: Path, key: str) -> str:
    with open_keras(path) as keras_file:
        tensor = keras_file.tensors[key]
        offset = keras_file.byte_ranges(tensor)[0][0]
    damaged = bytearray(path.read_bytes())
    damaged[offset] ^= 0x01
    path.write_bytes(bytes(damaged))
    return tensor.pointer


def test_adopted_plain_files_validate_and_damage_is_named(keras_run: KerasRun, tmp_path: Path) -> None:
    spec = tmp_path / "adopted.yaml"
    # A file adopted after the fact holds no epoch, and a weights file no layer config.
    lenient = keras_run.spec.read_text().replace("data_position: {require: required", "data_position: {require: optional")
    spec.write_text(lenient.replace("config: {require: required}", "config: {require: optional}"))
    for source in [*sorted(keras_run.plain.rglob("*.keras")), keras_run.plain / "backup" / "latest.weights.h5"]:
        copy = tmp_path / source.name
        shutil.copy(source, copy)
        code, _, err = _run("manifest", "--spec", spec, copy)
        assert code == 0, err
        code, out, _ = _run("validate", "--format", "json", copy)
        assert code == 0, out
        pointer = _flip(copy, "layers/dense/vars/0")
        code, out, _ = _run("validate", "--format", "json", copy)
        assert code == 1
        findings = json.loads(out)["results"][0]["findings"]
        assert [finding["pointer"] for finding in findings if finding["name"] == "tensor-checksum-mismatch"] == [pointer]


def test_diff_names_the_changed_tensor(keras_run: KerasRun, tmp_path: Path) -> None:
    source = keras_run.best[-1]
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    _flip(copy, "layers/dense_1/vars/1")
    code, out, _ = _run("diff", source, copy)
    assert code in (0, 1)
    changed = [line.strip() for line in out.splitlines() if line.strip().startswith("~")]
    assert len(changed) == 1 and changed[0].startswith("~ model:layers/dense_1/vars/1: float32[1] crc32c")


def test_malformed_inputs_exit_2_naming_the_file(keras_run: KerasRun, tmp_path: Path) -> None:
    cut = tmp_path / "cut.weights.h5"
    cut.write_bytes(keras_run.backup.read_bytes()[:600])
    for command in (["inspect"], ["diff", keras_run.backup]):
        code, out, err = _run(*command, cut)
        assert code == 2, (command, out, err)
        assert f"{cut}: malformed HDF5 structure: " in err and "Traceback" not in err
    code, _, err = _run("manifest", cut)
    assert code == 1 and f"{cut}: not adopted, no manifest written" in err
    assert not list(tmp_path.glob("*.ckptspec.yaml"))
