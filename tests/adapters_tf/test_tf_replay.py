"""Fingerprint replay of a TensorFlow checkpoint with no training code: a real Keras run exports its
model beside each bundle; `validate --replay` replays the fixed batch, and catches a model rebuilt
with another BatchNormalization epsilon, a model of another architecture, and a Lambda layer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import ckptspec.tensorflow
from ckptspec.cli import cli
from ckptspec.replay import replay

from ..validator.test_signing import _write_key_pair
from .tf_training import FINGERPRINT_BATCH, Run, build_model, make_run

_REPLAY_CODES = {"CKS336", "CKS337", "CKS338", "CKS418"}


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path, Path]:
    """A real training run saved with `export_program=True` and signed; its latest bundle prefix; the public key."""
    directory = tmp_path_factory.mktemp("tf-export")
    private, public = _write_key_pair(directory, "release")
    run = make_run(directory / "ckpts", export_program=True, max_to_keep=1, signing_key=private)
    run.train(2)
    run.manager.save()
    run.train(1)
    return run, run.manager.save(), public


def _copy(prefix: Path, destination: Path) -> Path:
    destination.mkdir()
    for path in prefix.parent.glob(f"{prefix.name}.*"):
        shutil.copy2(path, destination / path.name)
    return destination / prefix.name


def _validate(prefix: Path, *options: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(cli, ["validate", str(prefix), *options, "--format", "json"])
    findings = json.loads(result.stdout)["results"][0]["findings"]
    return result.exit_code, [finding["code"] for finding in findings], result.output


def _rebuilt(model: keras.Model, change: Callable[[keras.layers.Layer, dict[str, Any]], None]) -> keras.Model:
    """The model with the same layer names, each layer's config passed through `change`."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        change(layer, config)
        return type(layer).from_config(config)

    return keras.models.clone_model(model, clone_function=clone)


def test_export_writes_the_model_and_its_weight_map_and_replay_passes(exported: tuple[Run, Path, Path]) -> None:
    run, prefix, public = exported
    assert Path(f"{prefix}.keras").is_file()
    assert sorted(path.name for path in prefix.parent.glob("*.keras")) == [f"{prefix.name}.keras"]  # pruned with its bundle
    manifest = yaml.safe_load(Path(f"{prefix}.ckptspec.yaml").read_text())
    mapped = manifest["components"]["model"]["keras_weights"]
    assert len(mapped) == len(run.model.weights)
    assert set(mapped.values()) <= {tensor["name"] for tensor in manifest["components"]["model"]["tensors"]}
    code, codes, text = _validate(prefix, "--replay", "--trusted-key", str(public), "--require-signature")
    assert not _REPLAY_CODES & set(codes), text
    assert not [code for code in codes if code.startswith("CKS25")], text


def test_model_rebuilt_with_another_batchnorm_epsilon_is_caught(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    run, prefix, public = exported
    copy = _copy(prefix, tmp_path / "copy")

    def epsilon(layer: keras.layers.Layer, config: dict[str, Any]) -> None:
        if isinstance(layer, keras.layers.BatchNormalization):
            config["epsilon"] = 0.5

    model = _rebuilt(run.model, epsilon)
    model.set_weights(run.model.get_weights())
    model.save(Path(f"{copy}.keras"))
    code, codes, text = _validate(copy)
    assert not _REPLAY_CODES & set(codes), text  # the architecture and weights fit: only replay can tell
    code, codes, text = _validate(copy, "--replay")
    assert code == 1 and "CKS336" in codes, text
    assert "output 0 differs from the saved one" in text
    code, codes, text = _validate(copy, "--trusted-key", str(public))
    assert "CKS253" in codes and ".keras changed after signing" in text  # the signature saw the swap too


def test_model_of_another_architecture_is_named(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    run, prefix, _ = exported
    copy = _copy(prefix, tmp_path / "copy")

    def wider(layer: keras.layers.Layer, config: dict[str, Any]) -> None:
        if isinstance(layer, keras.layers.Dense) and config["units"] == 8:
            config["units"] = 6

    _rebuilt(run.model, wider).save(Path(f"{copy}.keras"))
    code, codes, text = _validate(copy)
    assert code == 1 and "CKS338" in codes, text
    assert "float32 [4, 8] weight(s) than the exported model" in text
    code, codes, text = _validate(copy, "--replay")
    assert "CKS337" in codes and "is not loaded" in text, text


def test_lambda_layer_is_refused_without_loading(
    exported: tuple[Run, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, prefix, _ = exported
    copy = _copy(prefix, tmp_path / "copy")
    inputs = keras.Input((4,))
    keras.Model(inputs, run.model(keras.layers.Lambda(lambda x: x * 2)(inputs))).save(Path(f"{copy}.keras"))

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("keras.saving.load_model was called on a refused model")

    monkeypatch.setattr(keras.saving, "load_model", never)
    code, codes, text = _validate(copy, "--replay")
    assert code == 1 and "CKS418" in codes and "CKS337" in codes, text
    assert "holds a Lambda" in text


def test_replay_without_the_exported_model_says_it_did_not_run(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    copy = _copy(exported[1], tmp_path / "copy")
    Path(f"{copy}.keras").unlink()
    code, codes, text = _validate(copy, "--replay")
    assert "CKS337" in codes and "no exported Keras model" in text, text


def test_exported_model_that_is_a_fifo_is_refused_without_blocking(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    copy = _copy(exported[1], tmp_path / "copy")
    program = Path(f"{copy}.keras")
    program.unlink()
    os.mkfifo(program)
    code, codes, text = _validate(copy, "--replay")
    assert code == 1 and "CKS418" in codes and "CKS337" in codes, text
    assert "not a regular file" in text
    (finding,) = replay(copy)  # called directly, without validate's own checks first
    assert finding.code == "CKS337" and "cannot be read" in finding.message


def test_directory_validation_judges_the_exported_model_with_its_bundle(exported: tuple[Run, Path, Path]) -> None:
    result = CliRunner().invoke(cli, ["validate", str(exported[1].parent), "--format", "json"])
    checkpoints = [entry["checkpoint"] for entry in json.loads(result.stdout)["results"]]
    assert checkpoints == [str(exported[1])], result.output


def test_replay_without_tensorflow_says_it_did_not_run(exported: tuple[Run, Path, Path]) -> None:
    code = (
        "import sys; sys.modules['tensorflow'] = sys.modules['keras'] = None\n"
        "from ckptspec.replay import replay\n"
        f"print([(f.code, f.message) for f in replay({str(exported[1])!r})])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "CKS337" in result.stdout and "needs TensorFlow and Keras" in result.stdout, result.stderr[-2000:]


def test_exported_model_with_members_keras_would_also_load_is_refused(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    copy = _copy(exported[1], tmp_path / "copy")
    with zipfile.ZipFile(Path(f"{copy}.keras"), "a") as archive:
        archive.writestr("assets/vocabulary.txt", "a\nb\n")
    code, codes, text = _validate(copy, "--replay")
    assert code == 1 and "CKS418" in codes and "CKS337" in codes, text
    assert "also holds assets/vocabulary.txt" in text


def test_saving_without_export_removes_a_stale_exported_model(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    directory.mkdir()
    stale = directory / "ckpt-1.keras"
    shutil.copy2(f"{exported[1]}.keras", stale)
    prefix = make_run(directory).manager.save()
    assert prefix == directory / "ckpt-1" and not stale.exists()


def test_model_fit_with_the_callback_exports_replayable_checkpoints(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    manager = ckptspec.tensorflow.CheckpointManager(
        tmp_path / "ckpts", model=model, optimizer=model.optimizer, fingerprint_batch=FINGERPRINT_BATCH, export_program=True
    )
    features = np.linspace(0.0, 1.0, 16 * 4, dtype=np.float32).reshape(16, 4)
    callback = ckptspec.tensorflow.CheckpointCallback(manager, every_n_epochs=1)
    model.fit(features, features.sum(axis=1), batch_size=8, epochs=2, verbose=0, callbacks=[callback])
    code, codes, text = _validate(manager.latest_checkpoint, "--replay")
    assert not _REPLAY_CODES & set(codes), text


def test_weight_map_pointing_outside_the_model_tensors_is_named(exported: tuple[Run, Path, Path], tmp_path: Path) -> None:
    copy = _copy(exported[1], tmp_path / "copy")
    manifest_path = Path(f"{copy}.ckptspec.yaml")
    manifest = yaml.safe_load(manifest_path.read_text())
    mapped = manifest["components"]["model"]["keras_weights"]
    first = next(iter(mapped))
    mapped[first] = manifest["components"]["fingerprint"]["outputs"][0]["name"]
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code, codes, text = _validate(copy, "--replay")
    assert code == 1 and "CKS338" in codes and "CKS337" in codes, text
    assert "which is not one of the model's variables in the checkpoint" in text
