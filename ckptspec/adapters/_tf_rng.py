"""The process-wide Python and NumPy generators, kept in a TensorFlow checkpoint as canonical JSON strings.

A `tf.train.Checkpoint` only saves `tf.random.Generator`s, yet TensorFlow training code also draws
from `random` and `numpy.random` (augmentation, shuffles in Python pipelines). Their states are
stored as scalar string variables under `rng/python` and `rng/numpy`: UTF-8 JSON with sorted keys
and no spaces, readable without TensorFlow and never pickled. Only NumPy's global legacy
`RandomState` (what `numpy.random.rand`, `shuffle`, ... draw from) is process-wide; a
`numpy.random.Generator` from `default_rng()` is an object of the program and is not captured.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["GLOBAL_GENERATORS", "capture_state", "restore_state", "state_digest"]

_PYTHON, _NUMPY = "python", "numpy"
GLOBAL_GENERATORS = (_PYTHON, _NUMPY)
"""The process-wide generators the TensorFlow adapter can save, by their spec names."""


def capture_state(name: str) -> bytes:
    """The canonical serialization of the named global generator's current state."""
    return _canonical(_CAPTURE[name]())


def restore_state(name: str, serialized: bytes) -> None:
    """Put the named global generator back in a state `capture_state` serialized.

    Raises:
        `ValueError` when `serialized` is not such a state.
    """
    try:
        state = json.loads(serialized.decode("utf-8"))
        _RESTORE[name](state)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a saved {name} generator state ({exc})") from exc


def state_digest(serialized: bytes) -> str:
    """What the manifest records for a global generator: the SHA-256 of its serialized state."""
    return hashlib.sha256(serialized).hexdigest()


def _canonical(state: Mapping[str, Any]) -> bytes:
    return json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _python_state() -> dict[str, Any]:
    version, internal, gauss_next = random.getstate()
    return {"generator": _PYTHON, "version": version, "state": list(internal), "gauss_next": gauss_next}


def _restore_python(state: Mapping[str, Any]) -> None:
    _expect(state, _PYTHON)
    random.setstate((int(state["version"]), tuple(int(word) for word in state["state"]), state["gauss_next"]))


def _numpy_state() -> dict[str, Any]:
    algorithm, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    return {
        "generator": _NUMPY,
        "algorithm": algorithm,
        "keys": [int(key) for key in keys],
        "pos": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _restore_numpy(state: Mapping[str, Any]) -> None:
    _expect(state, _NUMPY)
    keys = np.asarray(state["keys"], dtype=np.uint32)
    np.random.set_state(
        (str(state["algorithm"]), keys, int(state["pos"]), int(state["has_gauss"]), float(state["cached_gaussian"]))
    )


def _expect(state: Mapping[str, Any], name: str) -> None:
    if state.get("generator") != name:
        raise ValueError(f"it is the state of {state.get('generator')!r}")


_CAPTURE: dict[str, Callable[[], dict[str, Any]]] = {_PYTHON: _python_state, _NUMPY: _numpy_state}
_RESTORE: dict[str, Callable[[Mapping[str, Any]], None]] = {_PYTHON: _restore_python, _NUMPY: _restore_numpy}
