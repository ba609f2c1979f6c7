"""What the Hugging Face Trainer callback reads from the Trainer's live objects, at a save to record
it and at a resume to compare it with the record: the dataset's length and the samples a run has
drawn, the optimizer's steps and per-parameter state digests, the scheduler's step, the model's
construction config, one digest of the generators `rng_state.pth` holds; and the collectives through
which the ranks of a distributed run share what each one read."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import torch

from ._torch_records import optimizer_state_crc32c

__all__ = [
    "broadcast",
    "construction_config",
    "dataset_length",
    "distributed",
    "gathered",
    "optimizer_state",
    "optimizer_steps",
    "parameter_name",
    "process_rank",
    "rng_digest",
    "samples_before",
    "scheduler_step",
    "unwrapped",
]

_CONFIG_NOT_CONSTRUCTION = ("transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype", "problem_type")
"""Keys of `config.json` that record where a model came from, not how it computes, and `problem_type`,
which a classification model sets on itself at its first forward pass."""


def unwrapped(model: Any) -> torch.nn.Module:
    return getattr(model, "module", model)


def dataset_length(dataloader: Any) -> int | None:
    dataset = getattr(dataloader, "dataset", None)
    try:
        return len(dataset) if dataset is not None else None
    except TypeError:  # an iterable dataset has no length
        return None


def samples_before(data: Mapping[str, Any], global_step: int) -> int | None:
    """The samples a run over `data` has drawn by `global_step`, as the Trainer counts epochs and steps."""
    length, per_device, accumulation, world = (data.get(key) for key in ("dataset_length", "per_device_batch_size", "gradient_accumulation_steps", "world_size"))
    if not all(isinstance(value, int) and value > 0 for value in (length, per_device, accumulation, world)):
        return None
    batches = math.ceil(length / (per_device * world))
    steps_per_epoch = max(batches // accumulation, 1)
    epochs, steps = divmod(global_step, steps_per_epoch)
    return epochs * length + min(steps * accumulation * per_device * world, length)


def optimizer_steps(optimizer: Any) -> int | None:
    """The most steps any parameter's optimizer state has taken (`step` in torch's optimizers)."""
    state = getattr(optimizer, "state", None)
    if not isinstance(state, Mapping):
        return None
    steps = [value.get("step") for value in state.values() if isinstance(value, Mapping)]
    counted = [int(step.item()) if isinstance(step, torch.Tensor) else step for step in steps if step is not None]
    return max((step for step in counted if isinstance(step, int)), default=0)


def optimizer_state(optimizer: Any) -> dict[str, str] | None:
    """Per parameter, the CRC32C of its optimizer state (its moments), keyed as `optimizer.pt` keys it."""
    state_dict = getattr(optimizer, "state_dict", None)
    if optimizer is None or state_dict is None:
        return None
    return {str(index): digest for index, digest in optimizer_state_crc32c(state_dict()["state"]).items()}


def parameter_name(optimizer: Any, model: Any, index: str) -> str:
    """`'name'` of the model's parameter at `index` in the optimizer's state, else `parameter <index>`."""
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    names = {id(parameter): name for name, parameter in unwrapped(model).named_parameters()} if model is not None else {}
    position = int(index) if index.isdigit() else len(parameters)
    name = names.get(id(parameters[position])) if position < len(parameters) else None
    return repr(name) if name is not None else f"parameter {index}"


def scheduler_step(scheduler: Any) -> int | None:
    step = getattr(scheduler, "last_epoch", None)
    return step if isinstance(step, int) else None


def construction_config(model: Any) -> dict[str, Any] | None:
    config = getattr(unwrapped(model), "config", None) if model is not None else None
    if config is None or not hasattr(config, "to_dict"):
        return None
    # As trainer_state.json gives it back: keys of `id2label` become strings, tuples lists.
    return json.loads(config.to_json_string(use_diff=False), object_hook=lambda items: {key: value for key, value in items.items() if key not in _CONFIG_NOT_CONSTRUCTION})


def rng_digest() -> str:
    """One digest of the generators a Trainer saves in `rng_state.pth`: Python's, NumPy's, torch's (and CUDA's)."""
    import random

    digest = hashlib.sha256(repr(random.getstate()).encode())
    try:
        import numpy
    except ImportError:
        pass
    else:
        kind, keys, position, has_gauss, gauss = numpy.random.get_state()
        digest.update(keys.tobytes() + repr((kind, position, has_gauss, gauss)).encode())
    digest.update(torch.get_rng_state().numpy().tobytes())
    if torch.cuda.is_available():
        for state in torch.cuda.get_rng_state_all():
            digest.update(state.numpy().tobytes())
    return digest.hexdigest()


def process_rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0


def distributed() -> bool:
    """Whether this process is one of several ranks."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


def gathered(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order (every rank saves its own `rng_state_{rank}.pth`)."""
    if not distributed():
        return [value]
    values: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(values, value)
    return values


def broadcast(value: Any) -> Any:
    """Rank 0's `value` on every rank."""
    if not distributed():
        return value
    values = [value]
    torch.distributed.broadcast_object_list(values, src=0)
    return values[0]
