"""Export the Keras model beside a TensorFlow checkpoint (`<prefix>.keras`), with the map from its
weights to the bundle keys holding the same variables, so that `ckptspec validate --replay` can
replay the fingerprint without the training code.

The `.keras` file and the bundle track the same variables along different object graphs (Keras
names weights by layer, `tf.train.Checkpoint` by attribute edges), so restoring one into the other
binds nothing; the map recorded in the manifest joins them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import keras

from .._exceptions import AdapterError, WriteError
from ..formats.keras_export import keras_program_path_for
from ._tf_graph import GraphMatch

__all__ = ["export_keras", "keras_weight_map", "weight_path"]


def weight_path(model: keras.Model, variable: keras.Variable) -> str:
    """A weight's path without the model's own name, which a loaded Sequential model leaves out."""
    return variable.path.removeprefix(f"{model.name}/")


def keras_weight_map(model: keras.Model, match: GraphMatch, prefix: Path) -> dict[str, str]:
    """Each of the model's weights, in its weight order, → the bundle key that holds the same variable."""
    mapped: dict[str, str] = {}
    for variable in model.weights:
        path = weight_path(model, variable)
        keys = match.keys_of(variable)
        if len(keys) != 1 or path in mapped:
            raise AdapterError(
                f"{prefix}: cannot export the model: its weight {path!r} "
                + ("has another weight's path" if path in mapped else f"has {len(keys)} bundle keys, not one")
            )
        mapped[path] = keys[0]
    return mapped


def export_keras(model: keras.Model, prefix: Path) -> Path:
    """Write `<prefix>.keras` with `model.save`, atomically: a complete archive or the previous one."""
    target = keras_program_path_for(prefix)
    # Keras insists on the .keras suffix, so the temporary file keeps it (atomic_file's names do not).
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp.keras")
    try:
        model.save(temporary)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise WriteError(f"{target}: write failed, previous file kept: {exc.strerror or exc}") from None
        if isinstance(exc, Exception):  # Keras refuses models it cannot serialize in many ways
            raise AdapterError(f"{target}: Keras cannot save the model: {type(exc).__name__}: {exc}") from None
        raise
    return target
