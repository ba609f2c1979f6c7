"""A custom loop with tf.train.Checkpoint under ckptspec: exact resume, and a manifest that tells the truth."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import random
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from .tf_training import FINGERPRINT_BATCH, assert_same_state, make_run

from ckptspec import Spec, load_manifest, manifest_path_for, save_document
from ckptspec._records import crc32c_hex, sha256_file
from ckptspec._pointer import split_pointer
from ckptspec.formats.tfbundle import verify_bundle

STEPS_BEFORE, STEPS_AFTER = 3, 4
ALL_GENERATORS = Spec.model_validate(
    {
        "name": "all-generators",
        "framework": "tensorflow",
        "components": {"rng": {"generators": ["python", "numpy", "tensorflow"]}},
    }
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One interrupted run's checkpoint and the uninterrupted run's draws after it and state at the end."""
    directory = tmp_path_factory.mktemp("custom_loop")
    interrupted = make_run(directory / "interrupted", spec=ALL_GENERATORS)
    interrupted.train(STEPS_BEFORE)
    prefix = interrupted.manager.save()
    python_state, numpy_state = random.getstate(), np.random.get_state(legacy=True)
    uninterrupted = make_run(directory / "uninterrupted", spec=ALL_GENERATORS)
    uninterrupted.train(STEPS_BEFORE)
    uninterrupted.manager.save()
    uninterrupted.train(STEPS_AFTER)
    return {
        "directory": directory,
        "prefix": prefix,
        "expected": uninterrupted.state(),
        "draws": uninterrupted.draws[STEPS_BEFORE:],
        "run": interrupted,
        "global_states": (python_state, numpy_state),
    }


def test_resume_then_continue_equals_the_uninterrupted_run(saved: dict) -> None:
    """The resumed run is seeded differently, and enforces the spec embedded in the manifest."""
    resumed = make_run(saved["directory"] / "interrupted", seed=1)

    report = resumed.manager.restore()
    resumed.train(STEPS_AFTER)

    assert report.checkpoint == saved["prefix"]
    assert (report.data_position["global_step"], report.data_position["epoch"]) == (STEPS_BEFORE, 0)
    assert {"rng", "data_position"} <= set(report.restored)
    assert report.generators == ("generators/noise", "python", "numpy")
    assert report.fingerprint is not None and report.fingerprint.max_abs_difference == 0.0
    assert len(resumed.draws) == len(saved["draws"]) == STEPS_AFTER
    assert all(np.array_equal(now, then) for now, then in zip(resumed.draws, saved["draws"]))
    assert_same_state(resumed.state(), saved["expected"])


def test_resume_without_restore_differs(saved: dict, tmp_path: Path) -> None:
    """The control: the comparison above is sensitive to a state that was not brought back."""
    fresh = make_run(tmp_path, seed=1)
    fresh.train(STEPS_AFTER)
    state = fresh.state()
    assert any(not np.array_equal(state[name], value) for name, value in saved["expected"].items())


def test_python_and_numpy_states_are_what_the_comparison_hinges_on(saved: dict) -> None:
    """The control for the draws: everything restored but Python's and NumPy's states, and the draws differ."""
    resumed = make_run(saved["directory"] / "interrupted", seed=1)
    resumed.manager.restore()
    random.seed(5)
    np.random.seed(5)

    resumed.train(STEPS_AFTER)

    assert not any(np.array_equal(now, then) for now, then in zip(resumed.draws, saved["draws"]))


def test_manifest_crcs_equal_the_index_and_the_tensor_bytes(saved: dict) -> None:
    prefix = saved["prefix"]
    manifest = load_manifest(manifest_path_for(prefix))
    reader = tf.train.load_checkpoint(str(prefix))
    dtypes = reader.get_variable_to_dtype_map()
    tensors = manifest.components.model.tensors

    assert {t.name for t in tensors} == set(dtypes)
    for tensor in tensors:
        assert tensor.dtype == dtypes[tensor.name].name.replace("half", "float16")
        assert tensor.shape == reader.get_variable_to_shape_map()[tensor.name]
        if dtypes[tensor.name] not in (tf.string, tf.variant):
            assert tensor.crc32c == crc32c_hex(np.ascontiguousarray(reader.get_tensor(tensor.name)).tobytes())
    # The TF-free reader checks every stored CRC (string and variant ones too) against the data shard.
    assert verify_bundle(prefix) == []


def test_manifest_records_files_roles_and_state(saved: dict) -> None:
    prefix, run = saved["prefix"], saved["run"]
    manifest = load_manifest(manifest_path_for(prefix))
    components = manifest.components
    roles = {t.name: t.role for t in components.model.tensors}
    reader = tf.train.load_checkpoint(str(prefix))

    assert (manifest.format, manifest.checkpoint) == ("tf-bundle", prefix.name)
    for entry in manifest.files:
        path = prefix.parent / entry.path
        assert (entry.size, entry.sha256) == (path.stat().st_size, sha256_file(path))
    assert roles["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == "tensor"
    assert roles["keras_variables/layers-2-seed_generator_state/.ATTRIBUTES/VARIABLE_VALUE"] == "variable"
    assert sum(role == "variable" for role in roles.values()) == len(run.model.variables)
    assert sum(role == "slot" for role in roles.values()) == components.optimizer[0].state_tensor_count == 12

    modules = {m.path: m for m in components.config.modules}
    assert (modules["layers.1"].type.rsplit(".", 1)[-1], modules["layers.1"].constants["epsilon"]) == (
        "BatchNormalization",
        1e-3,
    )
    assert (modules["layers.0"].constants["units"], modules["layers.0"].constants["activation"]) == (8, "relu")
    assert modules["layers.2"].constants["rate"] == 0.25
    optimizer = components.optimizer[0]
    assert optimizer.type.endswith(".Adam")
    assert optimizer.param_groups[0].hyperparameters["learning_rate"] == pytest.approx(0.01)
    params = optimizer.param_groups[0].params
    expected = [("variable", list(v.shape)) for v in run.model.trainable_variables]
    assert [(roles[p.name], p.shape) for p in params] == expected
    assert int(reader.get_tensor(split_pointer(optimizer.at)[0])) == STEPS_BEFORE

    generator, python, numpy = components.rng.generators
    assert generator.sha256 == hashlib.sha256(reader.get_tensor(split_pointer(generator.at)[0]).tobytes()).hexdigest()
    python_state, numpy_state = saved["global_states"]
    keys = {name: f"rng/{name}/.ATTRIBUTES/VARIABLE_VALUE" for name in ("python", "numpy")}
    for record, key in [(python, keys["python"]), (numpy, keys["numpy"])]:
        assert (split_pointer(record.at), roles[key]) == ([key], "tensor")
        stored = reader.get_tensor(key)
        assert record.sha256 == hashlib.sha256(stored).hexdigest()
        assert json.loads(stored)["generator"] == record.name
    stored_python = json.loads(reader.get_tensor(keys["python"]))
    assert (stored_python["version"], tuple(stored_python["state"]), stored_python["gauss_next"]) == python_state
    stored_numpy = json.loads(reader.get_tensor(keys["numpy"]))
    assert stored_numpy["keys"] == numpy_state[1].tolist() and stored_numpy["pos"] == numpy_state[2]
    assert split_pointer(components.data_position.at) == ["iterator/.ATTRIBUTES/ITERATOR_STATE"]
    assert (components.data_position.global_step, components.data_position.epoch) == (STEPS_BEFORE, 0)

    fingerprint = components.fingerprint
    outputs = run.model(FINGERPRINT_BATCH, training=False).numpy()
    assert fingerprint.inputs[0].sha256 == hashlib.sha256(FINGERPRINT_BATCH.tobytes()).hexdigest()
    assert fingerprint.outputs[0].sha256 == hashlib.sha256(outputs.tobytes()).hexdigest()


def test_max_to_keep_deletes_the_manifests_of_deleted_bundles(tmp_path: Path) -> None:
    run = make_run(tmp_path, max_to_keep=2)
    prefixes = []
    for _ in range(4):
        run.train(1)
        prefixes.append(run.manager.save())

    assert run.manager.checkpoints == prefixes[2:]
    manifests = sorted(path.name for path in tmp_path.glob("*.ckptspec.yaml"))
    assert manifests == ["ckpt-3.ckptspec.yaml", "ckpt-4.ckptspec.yaml"]
    assert not any(Path(f"{prefix}.index").exists() for prefix in prefixes[:2])


def test_manifest_checks_against_the_bundle_without_tensorflow(saved: dict) -> None:
    code = f"""
import sys
from ckptspec import Spec, load_manifest, manifest_path_for, save_document
from ckptspec.formats.sstable import unmask_crc
from ckptspec.formats.tfbundle import open_bundle, verify_bundle
prefix = {str(saved["prefix"])!r}
manifest = load_manifest(manifest_path_for(prefix))
bundle = open_bundle(prefix)
recorded = {{(t.name, t.dtype, tuple(t.shape), t.crc32c) for t in manifest.components.model.tensors}}
stored = {{(e.key, e.dtype.name, e.shape, f"{{unmask_crc(e.crc32c):08x}}") for e in bundle.entries.values()}}
import hashlib, json
from ckptspec._pointer import split_pointer
states = {{g.name: bundle.decode(split_pointer(g.at)[0])[0] for g in manifest.components.rng.generators[1:]}}
digests = {{g.name: g.sha256 for g in manifest.components.rng.generators[1:]}}
decoded = {{name: json.loads(state)["generator"] for name, state in states.items()}}
print(digests == {{name: hashlib.sha256(state).hexdigest() for name, state in states.items()}})
print(decoded == {{"python": "python", "numpy": "numpy"}})
print(recorded == stored, verify_bundle(prefix) == [], "tensorflow" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert result.stdout.split() == ["True", "True", "True", "True", "False"], result.stderr


def test_the_static_validator_passes_the_bundle_without_tensorflow(tmp_path: Path) -> None:
    save_document(ALL_GENERATORS, tmp_path / "spec.yaml")
    run = make_run(tmp_path / "ckpts", spec=ALL_GENERATORS)
    run.train(2)
    prefix = run.manager.save()
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        f"sys.argv = ['ckptspec', 'validate', '--spec', {str(tmp_path / 'spec.yaml')!r}, {str(prefix)!r}]\n"
        "from ckptspec.cli import main; main()"
    )

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{prefix}: ok (tf-bundle, spec all-generators)" in result.stdout
