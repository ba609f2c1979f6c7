"""Compare ckptspec's tree with what `torch.load(weights_only=False)` returns, node by node."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
import torch
from ._torch_corpus import tensor_bytes

from ckptspec.formats._pickle_safety import Stub
from ckptspec.formats._pickle_values import NumpyArray, NumpyScalar, PickledDict, PickledNamespace
from ckptspec.formats._tensors import TensorRef, TorchDType


def assert_same_tree(ours: Any, theirs: Any, pointer: str = "") -> int:
    """Assert equality and return how many tensors were compared (so callers can assert coverage)."""
    if isinstance(theirs, torch.Tensor):
        _assert_same_tensor(ours, theirs, pointer)
        return 1
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{pointer}: {type(ours)} is not a dict"
        assert list(ours) == list(theirs), f"{pointer}: keys {list(ours)} != {list(theirs)}"
        if isinstance(ours, PickledDict) and hasattr(theirs, "_metadata"):
            assert ours.attributes["_metadata"] == theirs._metadata, f"{pointer}: _metadata"
        return sum(assert_same_tree(ours[k], theirs[k], f"{pointer}/{k}") for k in theirs)
    if isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) or isinstance(theirs, torch.Size), f"{pointer}: {type(ours)}"
        assert len(ours) == len(theirs), f"{pointer}: length"
        return sum(assert_same_tree(o, t, f"{pointer}/{i}") for i, (o, t) in enumerate(zip(ours, theirs)))
    _assert_same_leaf(ours, theirs, pointer)
    return 0


def _assert_same_tensor(ours: Any, theirs: torch.Tensor, pointer: str) -> None:
    assert isinstance(ours, TensorRef), f"{pointer}: {type(ours)} is not a TensorRef"
    assert ours.dtype == str(theirs.dtype).removeprefix("torch."), pointer
    assert ours.shape == tuple(theirs.shape), pointer
    assert ours.stride == tuple(theirs.stride()), pointer
    assert ours.storage_offset == theirs.storage_offset(), pointer
    assert ours.requires_grad == theirs.requires_grad, pointer
    assert ours.is_parameter == isinstance(theirs, torch.nn.Parameter), pointer
    assert ours.read_bytes() == tensor_bytes(theirs), f"{pointer}: bytes differ"


def _assert_same_leaf(ours: Any, theirs: Any, pointer: str) -> None:
    if isinstance(theirs, float) and math.isnan(theirs):
        assert isinstance(ours, float) and math.isnan(ours), pointer
    elif isinstance(theirs, torch.dtype):
        assert isinstance(ours, TorchDType) and f"torch.{ours.name}" == str(theirs), pointer
    elif isinstance(theirs, torch.device):
        assert ours == str(theirs), pointer
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, NumpyArray) and ours.dtype is not None, pointer
        assert (ours.dtype.descr, ours.shape, ours.data) == (theirs.dtype.str, theirs.shape, theirs.tobytes()), pointer
    elif isinstance(theirs, np.generic):
        assert isinstance(ours, NumpyScalar) and ours.value == theirs.item(), pointer
    elif isinstance(theirs, argparse.Namespace):
        assert isinstance(ours, PickledNamespace), pointer
        assert_same_tree(ours.attributes, vars(theirs), pointer)
    elif isinstance(theirs, type):
        assert isinstance(ours, type) and issubclass(ours, Stub), pointer
        assert (ours.module, ours.name) == (theirs.__module__, theirs.__qualname__), pointer
    elif isinstance(theirs, (str, int, float, bool, bytes, complex, set, frozenset, type(None))):
        assert type(ours) is type(theirs) and ours == theirs, f"{pointer}: {ours!r} != {theirs!r}"
    else:
        _assert_same_object(ours, theirs, pointer)


def _assert_same_object(ours: Any, theirs: Any, pointer: str) -> None:
    """A user object: ckptspec holds an inert stub of the same class, with the same state."""
    assert isinstance(ours, Stub), f"{pointer}: {type(theirs)} read as {type(ours)}"
    assert ours.qualname == f"{type(theirs).__module__}.{type(theirs).__qualname__}", pointer
    assert_same_tree(ours.state, vars(theirs), f"{pointer}/state")
