"""Replay a TensorFlow checkpoint's fixed batch through the Keras model exported beside it.

What runs: Keras' own layers, built from a private copy of `<prefix>.keras` after that copy was
judged (`ckptspec.checks.keras_program`: every class Keras' own, no Lambda, plain HDF5), loaded with
`safe_mode=True` and without compiling. The weights it saved are then overwritten, one by one through
the manifest's `keras_weights` map, with the training bundle's tensors (read with
`tf.train.load_checkpoint`, which deserializes no Python objects), and the fixed batch stored in the
bundle is run through it. Needs the `tensorflow` extra.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ._exceptions import ReaderError
from ._models import Manifest, Spec
from .checks._registry import Finding
from .checks.exported_program import FingerprintReplayMismatch, ProgramWeightsMismatch, ReplayNotRun
from .checks.keras_program import weight_problems
from .formats.keras_export import keras_program_path_for, read_keras_program

__all__ = ["replay_keras"]


class _NotRun(Exception):
    pass


def replay_keras(prefix: Path, manifest: Manifest, spec: Spec | None) -> list[Finding]:
    """One finding per fixed-batch output that differs from the recorded one, per weight that does not
    fit, or one saying why replay could not run."""
    program_path = keras_program_path_for(prefix)
    try:
        return _replay(prefix, program_path, manifest, spec)
    except _NotRun as reason:
        return [ReplayNotRun.finding(str(reason), checkpoint=str(prefix), file=str(program_path))]


def _replay(prefix: Path, program_path: Path, manifest: Manifest, spec: Spec | None) -> list[Finding]:
    try:
        import keras
        import tensorflow as tf
    except ImportError:
        raise _NotRun("replay of a TensorFlow checkpoint needs TensorFlow and Keras (install ckptspec[tensorflow])") from None
    components = manifest.components
    if components.model is None or components.fingerprint is None:
        raise _NotRun("the manifest records no model tensors and fixed batch to replay")
    if not program_path.exists() and not program_path.is_symlink():
        raise _NotRun(f"no exported Keras model {program_path.name} beside the checkpoint")
    with tempfile.TemporaryDirectory(prefix="ckptspec-replay-") as directory:
        model = _load_checked_copy(keras, program_path, Path(directory) / "model.keras", manifest)
    reader = _reader(tf, prefix)
    name, file = str(prefix), str(program_path)
    mismatches = _assign_weights(model, reader, components.model.keras_weights or {})
    if mismatches:
        return [ProgramWeightsMismatch.finding(line, checkpoint=name, file=file) for line in mismatches]
    rule = spec.components.fingerprint if spec is not None else components.fingerprint
    inputs = [_tensor(reader, digest.name) for digest in components.fingerprint.inputs]
    saved = [_tensor(reader, digest.name) for digest in components.fingerprint.outputs]
    return [
        FingerprintReplayMismatch.finding(f"fingerprint: {line}", checkpoint=name, file=file)
        for line in _differences(tf, model, inputs, saved, rule.atol, rule.rtol)
    ]


def _load_checked_copy(keras: Any, program_path: Path, copy: Path, manifest: Manifest) -> Any:
    """Copy the archive, judge the copy, load the copy: what Keras loads is what was judged."""
    try:
        shutil.copyfile(program_path, copy)
        program = read_keras_program(copy)
    except (OSError, ReaderError) as exc:
        raise _NotRun(f"{program_path.name} cannot be read, so it is not loaded: {exc}") from None
    if program.refusals:
        raise _NotRun(f"{program_path.name} is not loaded: {'; '.join(program.refusals)}")
    if weight_problems(manifest, program):
        raise _NotRun(f"{program_path.name} is not loaded: its weights cannot be the checkpoint's (see CKS338)")
    try:
        return keras.saving.load_model(copy, safe_mode=True, compile=False)
    except Exception as exc:  # noqa: BLE001 - a model Keras cannot rebuild is reported, not raised
        raise _NotRun(f"Keras cannot load {program_path.name}: {type(exc).__name__}: {exc}") from None


def _reader(tf: Any, prefix: Path) -> Any:
    try:
        return tf.train.load_checkpoint(str(prefix))
    except Exception as exc:  # noqa: BLE001 - TensorFlow's reader raises its own error kinds
        raise _NotRun(f"TensorFlow cannot read the bundle: {type(exc).__name__}: {exc}") from None


def _tensor(reader: Any, key: str) -> Any:
    try:
        return reader.get_tensor(key)
    except Exception as exc:  # noqa: BLE001 - TensorFlow's reader raises its own error kinds
        raise _NotRun(f"the bundle has no readable tensor {key!r}: {type(exc).__name__}") from None


def _assign_weights(model: Any, reader: Any, mapped: dict[str, str]) -> list[str]:
    """Assign every weight from the bundle through the map, strictly; the mismatches, none assigned if any."""
    from .adapters._tf_export import weight_path

    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    weights = {weight_path(model, variable): variable for variable in model.weights}
    problems = [f"the exported model's weight {path!r} is not in the manifest's keras_weights" for path in weights if path not in mapped]
    problems += [f"keras_weights names {path!r}, which the exported model does not have" for path in mapped if path not in weights]
    for path, key in mapped.items():
        variable = weights.get(path)
        if variable is None:
            continue
        if key not in shapes:
            problems.append(f"keras_weights maps {path!r} to {key!r}, which the bundle does not hold")
            continue
        saved = (dtypes[key].name, list(shapes[key]))
        exported = (str(variable.dtype), list(variable.shape))
        if saved != exported:
            problems.append(f"the exported model's weight {path!r} is {exported[0]} {exported[1]}; the checkpoint's {key!r} is {saved[0]} {saved[1]}")
    if not problems:
        for path, key in mapped.items():
            weights[path].assign(_tensor(reader, key))
    return problems


def _differences(tf: Any, model: Any, inputs: list[Any], saved: list[Any], atol: float, rtol: float) -> list[str]:
    import numpy as np

    try:
        result = model(inputs[0] if len(inputs) == 1 else inputs, training=False)
    except Exception as exc:  # noqa: BLE001 - the model's own error, reported as the replay's outcome
        raise _NotRun(f"the exported model fails on the fixed batch: {type(exc).__name__}: {exc}") from None
    replayed = [np.asarray(output) for output in tf.nest.flatten(result)]
    if len(replayed) != len(saved):
        return [f"the exported model returns {len(replayed)} outputs; the checkpoint recorded {len(saved)}"]
    lines = []
    for index, (now, before) in enumerate(zip(replayed, saved)):
        if now.shape != before.shape:
            lines.append(f"output {index} has shape {list(now.shape)}; the recorded one {list(before.shape)}")
        elif not np.allclose(now, before, atol=atol, rtol=rtol, equal_nan=True):
            worst = float(np.max(np.abs(now.astype(np.float64) - before.astype(np.float64))))
            lines.append(f"output {index} differs from the saved one by up to {worst:.6g} (allowed atol={atol}, rtol={rtol})")
    return lines
