"""A custom layer imported under another module path (a refactor, a notebook) restores with a note."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

import ckptspec.tensorflow

LAYER_SOURCE = """
import keras


class Scale(keras.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}
"""


def _import_as(name: str, path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(LAYER_SOURCE))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _model(layers) -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), layers.Scale()])


def test_a_moved_custom_layer_is_noted_and_a_changed_constant_still_refused(tmp_path: Path) -> None:
    flat = _import_as("layers", tmp_path / "flat" / "layers.py")
    packaged = _import_as("proj.layers", tmp_path / "proj" / "layers.py")
    batch = np.ones((2, 4), np.float32)
    try:
        ckptspec.tensorflow.CheckpointManager(tmp_path / "ckpts", model=_model(flat), fingerprint_batch=batch).save()
        manager = ckptspec.tensorflow.CheckpointManager(tmp_path / "ckpts", model=_model(packaged), fingerprint_batch=batch)
        with pytest.warns(ckptspec.tensorflow.RestoreNote, match=re.escape("is a proj.layers.Scale, a layers.Scale when saved")):
            report = manager.restore()
        assert report.fingerprint_replayed and len(report.notes) == 1

        changed = _model(packaged)
        changed.layers[-1].factor = 3.0
        manager = ckptspec.tensorflow.CheckpointManager(tmp_path / "ckpts", model=changed, fingerprint_batch=batch)
        with pytest.raises(ckptspec.RestoreError, match=re.escape("factor is 3.0 in the model but 2.0 in the checkpoint")):
            manager.restore()
    finally:
        del sys.modules["layers"], sys.modules["proj.layers"]
