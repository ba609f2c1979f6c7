"""Each way a TensorFlow restore loads without error yet differs from the saved run is caught, naming the cause."""

from __future__ import annotations

import random
import re
from pathlib import Path

import keras
import numpy as np
import pytest
from .tf_training import make_run

import ckptspec.tensorflow
from ckptspec import AdapterError, RestoreError, Spec, manifest_path_for


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = make_run(tmp_path_factory.mktemp("traps"))
    run.train(3)
    return run.manager.save()


@pytest.fixture(scope="module")
def scheduled_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = make_run(tmp_path_factory.mktemp("scheduled"), learning_rate=_decay(0.9))
    run.train(3)
    return run.manager.save()


def _decay(rate: float) -> keras.optimizers.schedules.ExponentialDecay:
    return keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=10, decay_rate=rate)


def _restore_error(checkpoint: Path, **options: object) -> str:
    overrides = options.pop("overrides", None)
    run = make_run(checkpoint.parent, seed=1, **options)
    with pytest.raises(RestoreError) as caught:
        run.manager.restore(checkpoint, overrides=overrides)
    return str(caught.value)


def test_batch_norm_epsilon_changed(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, epsilon=1e-5)

    assert re.fullmatch(
        rf"{checkpoint}: the model is not built as the checkpoint's model was:\n"
        r"  - layer layers\.1 \(BatchNormalization 'batch_normalization_\d+'\): "
        r"epsilon is 1e-05 in the model but 0\.001 in the checkpoint; "
        r'to allow it: components\.config\.ignore: \["layers\.1\.epsilon"\]',
        message,
    )


def test_new_learning_rate_without_override_is_refused(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, learning_rate=0.001)

    assert message == (
        f"{checkpoint}: the optimizer was built with learning_rate=0.001 but the checkpoint holds 0.01, which "
        "loading silently restored; to train on with the new rate pass overrides={'learning_rate': 0.001}, "
        "to resume as saved build the optimizer with 0.01"
    )


def test_learning_rate_override_is_applied_after_loading_and_reported(checkpoint: Path) -> None:
    run = make_run(checkpoint.parent, seed=1)

    report = run.manager.restore(overrides={"lr": 0.001})

    (override,) = report.changes
    assert (override.name, override.saved, override.applied) == ("learning_rate", 0.01, 0.001)  # as written, no float32 noise
    assert repr(override.saved) == "0.01"
    assert float(run.optimizer.learning_rate) == pytest.approx(0.001)


def test_generator_not_restored(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, generator_names=())

    assert message == (
        f"{checkpoint}: random generator 'generators/noise' was not restored: its state "
        "generators/noise/_state_var/.ATTRIBUTES/VARIABLE_VALUE is in the checkpoint but no tf.random.Generator "
        "was given to load it into (pass it in generators=)"
    )


def test_iterator_not_restored(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, with_iterator=False)

    assert message == (
        f"{checkpoint}: the data iterator was not restored: its position iterator/.ATTRIBUTES/ITERATOR_STATE is in "
        "the checkpoint but no tf.data iterator was given to load it into (pass iterator=iter(dataset)); training "
        "would restart the data"
    )


def test_schedule_not_restored(scheduled_checkpoint: Path) -> None:
    message = _restore_error(scheduled_checkpoint, learning_rate=0.01)

    assert message == (
        f"{scheduled_checkpoint}: the learning-rate schedule was not restored: the checkpoint was trained with "
        "keras.optimizers.schedules.ExponentialDecay(initial_learning_rate=0.01, decay_steps=10, decay_rate=0.9, "
        "staircase=False, name='ExponentialDecay'), but the optimizer has a constant learning rate; build it with "
        "the same schedule"
    )


def test_schedule_changed(scheduled_checkpoint: Path) -> None:
    message = _restore_error(scheduled_checkpoint, learning_rate=_decay(0.5))

    assert "the learning-rate schedule differs" in message
    assert message.endswith(
        "ExponentialDecay(initial_learning_rate=0.01, decay_steps=10, decay_rate=0.5, staircase=False, "
        "name='ExponentialDecay')"
    )


def test_scheduled_checkpoint_resumes_at_its_step(scheduled_checkpoint: Path) -> None:
    run = make_run(scheduled_checkpoint.parent, seed=1, learning_rate=_decay(0.9))

    report = run.manager.restore()

    assert report.data_position["global_step"] == int(run.optimizer.iterations) == 3
    assert float(run.optimizer.learning_rate) == pytest.approx(_decay(0.9)(3))


def test_values_left_unconsumed_are_named(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, with_optimizer=False)

    lines = message.splitlines()
    assert lines[0] == f"{checkpoint}: 14 saved values were not restored into anything (unconsumed):"
    assert "  - optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in lines
    assert "  - optimizer/_variables/2/.ATTRIBUTES/VARIABLE_VALUE" in lines


def test_variables_left_unmatched_are_named(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, generator_names=("noise", "augment"))

    assert message == (
        f"{checkpoint}: 1 variables of the program have no value in the checkpoint (unmatched):\n"
        "  - generators/augment/_state_var"
    )


def test_optimizer_setting_changed(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, beta_1=0.5)

    assert message == (
        f"{checkpoint}: the optimizer is not built as the checkpoint's optimizer was:\n"
        "  - beta_1 is 0.5 in the optimizer but 0.9 in the checkpoint"
    )


def test_override_outside_the_spec_is_refused(checkpoint: Path) -> None:
    # Refused up front by the validation all adapters share (an AdapterError), under the fallback spec.
    run = make_run(checkpoint.parent, seed=1)
    with pytest.raises(AdapterError) as caught:
        run.manager.restore(checkpoint, overrides={"beta_1": 0.5})

    assert str(caught.value) == (
        f"{checkpoint}: overrides ['beta_1'] are not overridable under spec 'everything in {checkpoint.name}' "
        "(components.optimizer.overridable: ['lr'])"
    )


def test_fingerprint_catches_what_the_spec_lets_through(checkpoint: Path) -> None:
    spec = _tf_spec(config={"ignore": ["*.epsilon"]})
    message = _restore_error(checkpoint, epsilon=0.5, spec=spec)

    assert re.fullmatch(
        rf"{checkpoint}: fingerprint mismatch: the saved batch through the restored model differs from the saved "
        r"output 0 by up to [0-9.e-]+ \(atol=0\.0, rtol=0\.0\)",
        message,
    )


def test_fingerprint_within_the_spec_tolerance_passes(checkpoint: Path) -> None:
    spec = _tf_spec(config={"ignore": ["*.epsilon"]}, fingerprint={"atol": 10.0})
    run = make_run(checkpoint.parent, seed=1, epsilon=0.5, spec=spec)

    report = run.manager.restore()

    assert report.fingerprint is not None
    assert 0.0 < report.fingerprint.max_abs_difference <= report.fingerprint.atol == 10.0


def test_spec_required_component_missing_from_the_checkpoint(tmp_path: Path) -> None:
    run = make_run(tmp_path, generator_names=(), global_generators=())
    run.train(1)
    prefix = run.manager.save()

    message = _restore_error(prefix, spec=_tf_spec())

    assert message == f"{prefix}: spec 'tiny' requires components the checkpoint does not hold: rng"


def test_restore_without_manifest(checkpoint: Path, tmp_path: Path) -> None:
    for path in checkpoint.parent.glob(f"{checkpoint.name}.*"):
        if not path.name.endswith(".ckptspec.yaml"):
            (tmp_path / path.name).write_bytes(path.read_bytes())

    message = _restore_error(tmp_path / checkpoint.name)

    assert message == (
        f"{tmp_path / checkpoint.name}: cannot check the restore: there is no manifest {checkpoint.name}.ckptspec.yaml beside it; "
        "this manager writes a bundle's manifest before the state file names the bundle, so it was written without ckptspec, "
        f"or its manifest was deleted since (`ckptspec manifest {tmp_path / checkpoint.name}` adopts it)"
    )
    assert not manifest_path_for(tmp_path / checkpoint.name).exists()


@pytest.mark.parametrize(
    ("components", "problem"),
    [
        ({"rng": {"generators": ["torch", "tensorflow"]}}, "components.rng.generators lists torch; a TensorFlow"),
        ({"scaler": {"require": "required"}}, "components.scaler is required, but the TensorFlow adapter"),
        ({"scheduler": {"require": "required"}}, "components.scheduler is required, but none was given"),
        ({"fingerprint": {"require": "forbidden"}}, "components.fingerprint is forbidden, but one is given"),
    ],
)
def test_spec_that_cannot_be_met_is_refused_when_the_manager_is_built(
    tmp_path: Path, components: dict, problem: str
) -> None:
    with pytest.raises(AdapterError, match=f"^spec 'tiny' cannot be met by this checkpoint manager:\n  - {problem}"):
        make_run(tmp_path, spec=_tf_spec(**components))


def test_spec_listing_a_global_generator_the_manager_leaves_out_is_refused(tmp_path: Path) -> None:
    spec = _tf_spec(rng={"generators": ["python", "numpy", "tensorflow"]})

    with pytest.raises(AdapterError, match="lists python, but global_generators= leaves it out$"):
        make_run(tmp_path, spec=spec, global_generators=("numpy",))


def test_unknown_global_generator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=r"^global_generators=\['torch'\]: torch is not a process-wide generator"):
        make_run(tmp_path, global_generators=("torch",))


@pytest.fixture(scope="module")
def checkpoint_without_global_generators(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = make_run(tmp_path_factory.mktemp("no_globals"), global_generators=())
    run.train(2)
    return run.manager.save()


def test_spec_requiring_global_generators_the_checkpoint_lacks(checkpoint_without_global_generators: Path) -> None:
    prefix = checkpoint_without_global_generators
    spec = _tf_spec(rng={"generators": ["python", "numpy", "tensorflow"]})

    message = _restore_error(prefix, spec=spec)

    assert message == (
        f"{prefix}: spec 'tiny' requires random generator states the checkpoint does not hold: python, numpy"
    )


def test_global_generators_the_checkpoint_lacks_are_left_as_they_are_when_not_required(
    checkpoint_without_global_generators: Path,
) -> None:
    run = make_run(checkpoint_without_global_generators.parent, seed=1)
    before = random.getstate(), np.random.get_state(legacy=True)[1].tolist()

    report = run.manager.restore()

    assert report.generators == ("generators/noise",)
    assert (random.getstate(), np.random.get_state(legacy=True)[1].tolist()) == before


def test_global_generator_not_restored(checkpoint: Path) -> None:
    message = _restore_error(checkpoint, global_generators=("numpy",))

    assert message == (
        f"{checkpoint}: random generator 'python' was not restored: its state "
        "rng/python/.ATTRIBUTES/VARIABLE_VALUE is in the checkpoint but the manager's global_generators= leaves "
        "python out"
    )


def test_model_without_weights_is_refused(tmp_path: Path) -> None:
    model = keras.Sequential([keras.layers.Dense(1)])
    manager = ckptspec.tensorflow.CheckpointManager(tmp_path, model=model, optimizer=keras.optimizers.SGD())

    with pytest.raises(AdapterError, match="^the model has no weights yet"):
        manager.save()
    assert list(tmp_path.iterdir()) == []


def _tf_spec(**components: dict) -> Spec:
    rules = {"rng": {"generators": ["tensorflow"]}, **components}
    rules["rng"] = {"generators": ["tensorflow"], **rules["rng"]}
    return Spec.model_validate({"name": "tiny", "framework": "tensorflow", "components": rules})


def test_restored_state_is_the_saved_state(checkpoint: Path) -> None:
    run = make_run(checkpoint.parent, seed=1)
    run.manager.restore()
    reference = make_run(checkpoint.parent, seed=2)
    reference.manager.restore()

    assert all(np.array_equal(a, b) for a, b in zip(run.model.get_weights(), reference.model.get_weights()))


@pytest.mark.parametrize(
    ("options", "problem"),
    [({}, "overrides ['bogus'] name no setting of the optimizer"), ({"with_optimizer": False}, "overrides ['bogus'] given, but there is no optimizer")],
)
def test_unknown_override_or_one_without_an_optimizer_is_refused(checkpoint: Path, options: dict, problem: str) -> None:
    run = make_run(checkpoint.parent, seed=1)
    manager = run.manager if options.get("with_optimizer", True) else ckptspec.tensorflow.CheckpointManager(checkpoint.parent, model=run.model)
    with pytest.raises(AdapterError, match=re.escape(f"{checkpoint}: {problem}")):
        manager.restore(checkpoint, overrides={"bogus": 1})


def test_restore_without_a_spec_enforces_everything_the_checkpoint_holds(checkpoint: Path) -> None:
    report = make_run(checkpoint.parent, seed=1).manager.restore(checkpoint)

    assert report.not_restored == ()
    assert set(report.restored) == {"model", "optimizer", "rng", "data_position", "fingerprint"}
