"""Random generator states and the fingerprint: a fixed batch and the outputs it gave at save time.

Both are stored inside the checkpoint in forms `torch.load(weights_only=True)` accepts (tensors,
numbers, strings, lists, dicts), so Lightning's default loading keeps working.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .._exceptions import AdapterError
from .._models import FingerprintRecord, FingerprintRule, RngGenerator, RngRecord, TensorDigest
from .._pointer import join_pointer, split_pointer
from ._report import FingerprintReplay
from ._torch_tensors import dtype_name, sha256_of, shape_of, tensor_bytes

__all__ = [
    "FingerprintState",
    "capture_fingerprint",
    "capture_fingerprint_for",
    "capture_rng",
    "check_fingerprint",
    "evaluating",
    "fingerprint_differences",
    "fingerprint_record",
    "flatten_outputs",
    "generator_digests",
    "replay_fingerprint",
    "restore_rng",
    "rng_record",
]

FingerprintState = dict[str, Any]
"""{'args': [tensor, ...], 'kwargs': {name: tensor}, 'outputs': {name: tensor}} as stored in a checkpoint."""


def capture_rng() -> dict[str, Any]:
    states: dict[str, Any] = {"python": _python_state(), "torch": torch.get_rng_state()}
    numpy_state = _numpy_state()
    if numpy_state is not None:
        states["numpy"] = numpy_state
    if torch.cuda.is_available():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"cuda:{index}"] = state
    return states


def restore_rng(states: Mapping[str, Any]) -> list[str]:
    """Put every saved generator back; returns the names restored. A state saved by another library
    in its own form (`random.getstate()`'s tuple, `numpy.random.get_state()`'s) is put back as well."""
    restored = []
    for name, state in states.items():
        if name == "python":
            random.setstate(state if isinstance(state, tuple) else (state["version"], tuple(state["state"].tolist()), state["gauss_next"]))
        elif name == "numpy":
            _restore_numpy(state)
        elif name == "torch":
            torch.set_rng_state(state)
        elif name.startswith("cuda:") and torch.cuda.is_available():
            torch.cuda.set_rng_state(state, int(name.split(":", 1)[1]))
        else:
            continue
        restored.append(name)
    return restored


def generator_digests(names: Collection[str]) -> dict[str, str]:
    """The digest of each named generator's live state, as `rng_record` records a saved one."""
    return {name: _state_digest(state) for name, state in capture_rng().items() if name in names}


def rng_record(at: str, states: Mapping[str, Any]) -> RngRecord:
    return RngRecord(
        generators=[
            RngGenerator(name=name, at=join_pointer([*split_pointer(at), name]), sha256=_state_digest(state))
            for name, state in states.items()
        ]
    )


def _python_state() -> dict[str, Any]:
    version, internal, gauss_next = random.getstate()
    return {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next}


def _numpy_state() -> dict[str, Any] | None:
    try:
        import numpy
    except ImportError:
        return None
    algorithm, keys, position, has_gauss, cached_gaussian = numpy.random.get_state(legacy=True)
    return {
        "algorithm": algorithm,
        "keys": torch.from_numpy(keys.astype(numpy.int64)),
        "pos": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _restore_numpy(state: Mapping[str, Any] | tuple[Any, ...]) -> None:
    import numpy

    if isinstance(state, tuple):
        numpy.random.set_state(state)
        return
    keys = state["keys"].numpy().astype(numpy.uint32)
    numpy.random.set_state((state["algorithm"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"]))


def _state_digest(state: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, state)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        digest.update(tensor_bytes(value))
    elif isinstance(value, Mapping):
        for key in sorted(value):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    else:
        digest.update(repr(value).encode())


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode, no autograd, and every generator left as it was: a replay must not perturb training."""
    modes = [(module, module.training) for module in model.modules()]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        model.eval()
        try:
            yield
        finally:
            for module, training in modes:
                module.training = training


def _split_batch(batch: Any) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    if isinstance(batch, torch.Tensor):
        return [batch], {}
    if isinstance(batch, Mapping):
        return [], dict(batch)
    if isinstance(batch, Sequence):
        return list(batch), {}
    raise TypeError(f"a fingerprint batch is a tensor, a tuple of tensors or a dict of tensors, not {type(batch).__name__}")


def flatten_outputs(prefix: str, value: Any, into: dict[str, torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        into[prefix] = value.detach().cpu().clone()
    elif isinstance(value, Mapping):
        for key, item in value.items():
            flatten_outputs(f"{prefix}.{key}", item, into)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            flatten_outputs(f"{prefix}.{index}", item, into)


def _run(model: torch.nn.Module, args: list[torch.Tensor], kwargs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    device = next((parameter.device for parameter in model.parameters()), torch.device("cpu"))
    with evaluating(model):
        result = model(*(arg.to(device) for arg in args), **{key: arg.to(device) for key, arg in kwargs.items()})
    outputs: dict[str, torch.Tensor] = {}
    flatten_outputs("output", result, outputs)
    return outputs


def capture_fingerprint(model: torch.nn.Module, batch: Any) -> FingerprintState:
    args, kwargs = _split_batch(batch)
    args = [arg.detach().cpu().clone() for arg in args]
    kwargs = {key: arg.detach().cpu().clone() for key, arg in kwargs.items()}
    return {"args": args, "kwargs": kwargs, "outputs": _run(model, args, kwargs)}


def capture_fingerprint_for(by: str, model: torch.nn.Module, batch: Any) -> FingerprintState:
    """`capture_fingerprint`, or `AdapterError` naming `by`'s `fingerprint_batch=` when the model cannot take the batch."""
    try:
        return capture_fingerprint(model, batch)
    except Exception as exc:  # the model's own forward: any error it raises means the batch does not fit
        raise AdapterError(
            f"{by}(fingerprint_batch=...): {type(model).__name__}.forward cannot take the batch: {type(exc).__name__}: {exc}"
        ) from exc


def replay_fingerprint(model: torch.nn.Module, state: FingerprintState) -> dict[str, torch.Tensor]:
    return _run(model, list(state["args"]), dict(state["kwargs"]))


def _input_items(state: FingerprintState) -> list[tuple[str, torch.Tensor]]:
    return [(f"args.{index}", arg) for index, arg in enumerate(state["args"])] + [
        (f"kwargs.{key}", arg) for key, arg in state["kwargs"].items()
    ]


def _digest(name: str, tensor: torch.Tensor) -> TensorDigest:
    return TensorDigest(name=name, dtype=dtype_name(tensor), shape=shape_of(tensor), sha256=sha256_of(tensor))


def fingerprint_record(at: str, state: FingerprintState, *, atol: float, rtol: float) -> FingerprintRecord:
    return FingerprintRecord(
        at=at,
        inputs=[_digest(name, tensor) for name, tensor in _input_items(state)],
        outputs=[_digest(name, tensor) for name, tensor in state["outputs"].items()],
        atol=atol,
        rtol=rtol,
    )


def check_fingerprint(
    model: torch.nn.Module, state: FingerprintState | None, rule: FingerprintRule, *, left_fresh: bool
) -> tuple[FingerprintReplay | None, list[str]]:
    """Replays the saved batch through the restored model: the replay, and one problem line per output that differs.

    Tensors the spec let stay fresh (a new head) cannot reproduce the saved outputs; nothing is replayed then.
    """
    if state is None or left_fresh:
        return None, []
    saved, replayed = state["outputs"], replay_fingerprint(model, state)
    lines = fingerprint_differences(saved, replayed, atol=rule.atol, rtol=rule.rtol)
    replay = FingerprintReplay(len(saved), _max_abs_difference(saved, replayed), rule.atol, rule.rtol)
    return replay, [f"fingerprint: {line}" for line in lines]


def _max_abs_difference(saved: Mapping[str, torch.Tensor], replayed: Mapping[str, torch.Tensor]) -> float:
    differences = [
        torch.nan_to_num((replayed[name].double() - tensor.double()).abs(), nan=0.0).max().item()
        for name, tensor in saved.items()
        if name in replayed and replayed[name].shape == tensor.shape and tensor.numel()
    ]
    return max(differences, default=0.0)


def fingerprint_differences(
    saved: Mapping[str, torch.Tensor], replayed: Mapping[str, torch.Tensor], *, atol: float, rtol: float
) -> list[str]:
    """One line per output of the fixed batch that the restored model no longer reproduces."""
    lines = []
    for name in sorted(set(saved) | set(replayed)):
        before, after = saved.get(name), replayed.get(name)
        if before is None or after is None:
            lines.append(f"output {name!r} is {'missing' if after is None else 'new'} in the replay")
        elif before.shape != after.shape or before.dtype != after.dtype:
            lines.append(
                f"output {name!r} is {dtype_name(after)} {shape_of(after)} in the replay, "
                f"{dtype_name(before)} {shape_of(before)} when saved"
            )
        elif not _matches(before, after, atol=atol, rtol=rtol):
            delta = (after.double() - before.double()).abs()
            lines.append(
                f"output {name!r} differs from the saved one by up to {delta.max().item():.6g} "
                f"(largest saved magnitude {before.double().abs().max().item():.6g}; "
                f"{int((delta > 0).sum())} of {before.numel()} values differ; allowed by components.fingerprint: atol={atol:g}, rtol={rtol:g})"
            )
    return lines


def _matches(before: torch.Tensor, after: torch.Tensor, *, atol: float, rtol: float) -> bool:
    if atol == 0 and rtol == 0:
        return tensor_bytes(before) == tensor_bytes(after)
    return bool(torch.allclose(after.double(), before.double(), atol=atol, rtol=rtol, equal_nan=True))
