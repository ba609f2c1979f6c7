"""The checks a TensorFlow restore must pass, each raising `RestoreError` that names the cause.

Checks on what a bundle cannot hold (layer constants, optimizer settings, the schedule) run before
anything is loaded; checks on what the load did (values left unconsumed, generators, the iterator,
counters, the fingerprint) run right after it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from .._exceptions import RestoreError
from .._models import Manifest, Spec
from .._models.common import JSONValue
from .._pointer import split_pointer
from ._tf_config import LiveLayer, config_differences, describe_layers, optimizer_hyperparameters, schedule_config
from ._report import FingerprintReplay, HyperparameterChange
from ._tf_graph import GraphMatch
from ._tf_rng import GLOBAL_GENERATORS, restore_state, state_digest

__all__ = [
    "check_before_loading",
    "check_config",
    "check_consumed",
    "check_counters",
    "check_generators",
    "check_learning_rate",
    "check_optimizer_settings",
    "check_recorded_components",
    "check_recorded_generators",
    "check_schedule",
    "replay_fingerprint",
    "restore_global_generators",
]


def _fail(prefix: Path, problem: str, lines: Sequence[str] = ()) -> RestoreError:
    details = "".join(f"\n  - {line}" for line in lines)
    return RestoreError(f"{prefix}: {problem}{details}")


def check_recorded_components(prefix: Path, manifest: Manifest, spec: Spec) -> None:
    """Every component the spec requires was saved with this checkpoint."""
    components = manifest.components
    recorded = {
        "model": components.model,
        "config": components.config,
        "optimizer": components.optimizer,
        "scheduler": components.scheduler,
        "rng": components.rng,
        "data_position": components.data_position,
        "fingerprint": components.fingerprint,
    }
    rules = spec.components
    missing = [name for name, record in recorded.items() if not record and getattr(rules, name).require == "required"]
    if missing:
        raise _fail(
            prefix, f"spec {spec.name!r} requires components the checkpoint does not hold: {', '.join(missing)}"
        )


def check_recorded_generators(prefix: Path, manifest: Manifest, spec: Spec) -> None:
    """Every generator the spec lists was saved: `python` and `numpy` by name, `tensorflow` as any other."""
    if spec.components.rng.require != "required":
        return
    names = [generator.name for generator in manifest.components.rng.generators] if manifest.components.rng else []
    recorded = {name if name in GLOBAL_GENERATORS else "tensorflow" for name in names}
    missing = [name for name in spec.components.rng.generators if name != "cuda" and name not in recorded]
    if missing:
        raise _fail(
            prefix,
            f"spec {spec.name!r} requires random generator states the checkpoint does not hold: {', '.join(missing)}",
        )


def check_config(prefix: Path, manifest: Manifest, live: list[LiveLayer], spec: Spec) -> list[str]:
    """Refuses layer constants that differ; returns the notes on layers found under another module path."""
    recorded = manifest.components.config
    if recorded is None:
        return []
    differences, notes = config_differences(recorded.modules, live, spec.components.config.ignore)
    if differences:
        raise _fail(prefix, "the model is not built as the checkpoint's model was:", differences)
    return notes


def check_optimizer_settings(
    prefix: Path,
    manifest: Manifest,
    optimizer: keras.optimizers.Optimizer,
    overrides: Mapping[str, JSONValue],
) -> None:
    """Settings no bundle holds (beta_1, epsilon, ...) must match unless overridden on purpose."""
    if not manifest.components.optimizer:
        return
    record = manifest.components.optimizer[0]
    if record.type.rsplit(".", 1)[-1] != type(optimizer).__name__:
        raise _fail(prefix, f"the optimizer is a {type(optimizer).__name__}, the checkpoint's was a {record.type}")
    saved = record.param_groups[0].hyperparameters
    # The learning rate is in the bundle and is checked once it is loaded.
    now = optimizer_hyperparameters(optimizer)
    differences = [
        f"{name} is {now.get(name, '<absent>')!r} in the optimizer "
        f"but {saved.get(name, '<absent>')!r} in the checkpoint"
        for name in sorted(set(saved) | set(now))
        if name != "learning_rate" and name not in overrides and saved.get(name) != now.get(name)
    ]
    if differences:
        raise _fail(prefix, "the optimizer is not built as the checkpoint's optimizer was:", differences)


def check_schedule(prefix: Path, manifest: Manifest, optimizer: keras.optimizers.Optimizer | None) -> None:
    if not manifest.components.scheduler:
        return
    record = manifest.components.scheduler[0]
    current = schedule_config(optimizer) if optimizer is not None else None
    saved = f"{record.type}({_arguments(record.state)})"
    if current is None:
        raise _fail(
            prefix,
            f"the learning-rate schedule was not restored: the checkpoint was trained with {saved}, "
            "but the optimizer has a constant learning rate; build it with the same schedule",
        )
    if (current[0], current[1]) != (record.type, record.state):
        raise _fail(
            prefix,
            f"the learning-rate schedule differs: the checkpoint was trained with {saved}, "
            f"the optimizer has {current[0]}({_arguments(current[1])})",
        )


def check_before_loading(
    prefix: Path,
    manifest: Manifest,
    spec: Spec,
    requested: Mapping[str, JSONValue],
    *,
    manager_spec: Spec | None,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer | None,
) -> list[str]:
    """What no bundle holds: the spec's components, layer constants, optimizer settings and schedule;
    returns what was accepted but is worth reporting. `manager_spec` is the manager's own spec, `spec`
    the one the restore enforces."""
    check_recorded_components(prefix, manifest, spec)
    if manager_spec is not None or (manifest.spec is not None and manifest.spec.document is not None):
        # A spec inferred from the checkpoint lists the default generators, not what was saved.
        check_recorded_generators(prefix, manifest, spec)
    notes = check_config(prefix, manifest, describe_layers(model), spec)
    if optimizer is not None:
        check_optimizer_settings(prefix, manifest, optimizer, requested)
        check_schedule(prefix, manifest, optimizer)
        _refuse_rate_override_under_schedule(prefix, optimizer, requested)
    return notes


def _refuse_rate_override_under_schedule(
    prefix: Path, optimizer: keras.optimizers.Optimizer, requested: Mapping[str, JSONValue]
) -> None:
    if "learning_rate" in requested and schedule_config(optimizer) is not None:
        raise RestoreError(
            f"{prefix}: cannot override learning_rate: the optimizer takes its rate from a schedule; "
            "build it with the schedule you want instead"
        )


def _arguments(state: Mapping[str, JSONValue]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in state.items())


def check_consumed(
    prefix: Path, manifest: Manifest, match: GraphMatch, spec: Spec, own_keys: set[str], optional_paths: set[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Nothing saved is left behind and nothing stateful is left unloaded, unless the spec allows it.

    `own_keys` are saved values the adapter may leave unloaded, `optional_paths` live variables it may
    leave without a value. Returns what the spec allowed: the variables left fresh (unmatched) and the
    saved values ignored (unconsumed).
    """
    unconsumed = set(match.unconsumed)
    _check_generators_consumed(prefix, manifest, unconsumed)
    _check_iterator_consumed(prefix, manifest, unconsumed)
    if match.conflicts:
        raise _fail(
            prefix,
            "one saved object would be restored into two different live objects (the optimizer was built over "
            "other weights, or in another order):",
            match.conflicts,
        )
    rule = spec.components.model
    ignored = sorted(key for key in unconsumed - own_keys if _matching(key, rule.allow_unexpected))
    left = sorted(unconsumed - own_keys - set(ignored))
    if left:
        raise _fail(prefix, f"{len(left)} saved values were not restored into anything (unconsumed):", left)
    left_fresh = sorted(path for path in match.unmatched if _matching(path, rule.allow_missing))
    unmatched = sorted(set(match.unmatched) - set(left_fresh) - optional_paths)
    if unmatched:
        raise _fail(
            prefix, f"{len(unmatched)} variables of the program have no value in the checkpoint (unmatched):", unmatched
        )
    return tuple(left_fresh), tuple(ignored)


def _matching(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _check_generators_consumed(prefix: Path, manifest: Manifest, unconsumed: set[str]) -> None:
    generators = manifest.components.rng.generators if manifest.components.rng else []
    for generator in generators:
        key = _key(generator.at)
        if key in unconsumed:
            hint = (
                f"the manager's global_generators= leaves {generator.name} out"
                if generator.name in GLOBAL_GENERATORS
                else "no tf.random.Generator was given to load it into (pass it in generators=)"
            )
            raise _fail(
                prefix,
                f"random generator {generator.name!r} was not restored: its state {key} is in the checkpoint but {hint}",
            )


def _check_iterator_consumed(prefix: Path, manifest: Manifest, unconsumed: set[str]) -> None:
    position = manifest.components.data_position
    key = _key(position.at) if position is not None and position.at else None
    if key is not None and key in unconsumed:
        raise _fail(
            prefix,
            f"the data iterator was not restored: its position {key} is in the checkpoint but no tf.data iterator "
            "was given to load it into (pass iterator=iter(dataset)); training would restart the data",
        )


def _key(pointer: str) -> str:
    (key,) = split_pointer(pointer)
    return key


def check_learning_rate(
    prefix: Path, built_with: float, loaded: float, overrides: Mapping[str, JSONValue]
) -> HyperparameterChange | None:
    """The rate the optimizer was built with must not be silently replaced by the saved one."""
    if "learning_rate" in overrides:
        return HyperparameterChange("learning_rate", loaded, overrides["learning_rate"])
    if not np.isclose(built_with, loaded, rtol=1e-6, atol=0.0):
        raise _fail(
            prefix,
            f"the optimizer was built with learning_rate={built_with:.6g} but the checkpoint holds {loaded:.6g}, "
            "which loading silently restored; to train on with the new rate pass "
            f"overrides={{'learning_rate': {built_with:.6g}}}, "
            f"to resume as saved build the optimizer with {loaded:.6g}",
        )
    return None


def check_counters(prefix: Path, manifest: Manifest, step: tf.Variable, epoch: tf.Variable) -> None:
    position = manifest.components.data_position
    if position is None:
        return
    live = {"global_step": int(step.numpy()), "epoch": int(epoch.numpy())}
    saved = {"global_step": position.global_step, "epoch": position.epoch}
    wrong = [f"{name} is {live[name]}, the checkpoint says {saved[name]}" for name in live if saved[name] != live[name]]
    if wrong:
        raise _fail(prefix, "the step and epoch counters were not restored:", wrong)


def check_generators(
    prefix: Path, manifest: Manifest, match: GraphMatch, generators: Sequence[tf.random.Generator]
) -> None:
    """Each recorded generator's live state is, byte for byte, the state that was saved."""
    saved = {_key(g.at): g for g in manifest.components.rng.generators} if manifest.components.rng else {}
    for generator in generators:
        for key in match.keys_of(generator.state):
            record = saved.get(key)
            digest = hashlib.sha256(generator.state.numpy().tobytes()).hexdigest()
            if record is not None and record.sha256 is not None and record.sha256 != digest:
                raise _fail(prefix, f"random generator {record.name!r} does not hold the saved state after loading")


def restore_global_generators(prefix: Path, manifest: Manifest, states: Mapping[str, tf.Variable]) -> None:
    """Set the Python and NumPy generators to the states just loaded into `states`, checked against the manifest."""
    records = manifest.components.rng.generators if manifest.components.rng else []
    for record in records:
        variable = states.get(record.name)
        if variable is None:
            continue
        serialized = variable.numpy()
        if record.sha256 is not None and record.sha256 != state_digest(serialized):
            raise _fail(prefix, f"random generator {record.name!r} does not hold the saved state after loading")
        try:
            restore_state(record.name, serialized)
        except ValueError as exc:
            raise _fail(prefix, f"random generator {record.name!r} cannot be restored: {exc}") from exc


def replay_fingerprint(
    prefix: Path, manifest: Manifest, model: keras.Model, structure: object | None, spec: Spec
) -> FingerprintReplay | None:
    """Run the saved batch through the restored model and compare with the saved outputs."""
    record = manifest.components.fingerprint
    if record is None:
        return None
    reader = tf.train.load_checkpoint(str(prefix))
    inputs = [reader.get_tensor(digest.name) for digest in record.inputs]
    saved = [reader.get_tensor(digest.name) for digest in record.outputs]
    batch = tf.nest.pack_sequence_as(structure, inputs) if structure is not None else _single(inputs)
    replayed = [np.asarray(output) for output in tf.nest.flatten(model(batch, training=False))]
    atol, rtol = spec.components.fingerprint.atol, spec.components.fingerprint.rtol
    worst = 0.0
    for index, (now, before) in enumerate(zip(replayed, saved)):
        if now.shape != before.shape:
            raise _fail(prefix, f"fingerprint output {index} has shape {list(now.shape)}, saved {list(before.shape)}")
        difference = float(np.max(np.abs(now.astype(np.float64) - before.astype(np.float64)), initial=0.0))
        worst = max(worst, difference)
        if not np.allclose(now, before, atol=atol, rtol=rtol, equal_nan=True):
            raise _fail(
                prefix,
                f"fingerprint mismatch: the saved batch through the restored model differs from the saved output "
                f"{index} by up to {difference:.6g} (atol={atol}, rtol={rtol})",
            )
    if len(replayed) != len(saved):
        raise _fail(
            prefix, f"fingerprint: the model returns {len(replayed)} outputs, the checkpoint saved {len(saved)}"
        )
    return FingerprintReplay(len(saved), worst, atol, rtol)


def _single(inputs: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    return inputs[0] if len(inputs) == 1 else inputs
