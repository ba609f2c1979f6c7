"""Tensors as bytes: the per-tensor CRC32C and SHA-256 that manifests record, and JSON scalars.

A digest is taken over the tensor's elements in row-major order, as they lie in a checkpoint
file, so the torch-free reader computes the same value from the file without torch.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, TypeVar

import torch

from .._json_form import JsonForm, NoJsonForm
from .._pool import digest_pool
from .._records import crc32c_hex

__all__ = [
    "crc32c_of",
    "crc32c_of_many",
    "dtype_name",
    "hyperparameters_form",
    "jsonable",
    "omegaconf_content",
    "scalar_items",
    "sha256_of",
    "shape_of",
    "tensor_bytes",
]

_PARALLEL_BYTES = 1 << 20
_Name = TypeVar("_Name", bound=Hashable)


def dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def shape_of(tensor: torch.Tensor) -> list[int]:
    return list(tensor.shape)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes without copying when it is already a contiguous CPU tensor."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    # A byte view works for every element type numpy lacks (bfloat16, float8, ...).
    return memoryview(flat.view(torch.uint8).numpy())


def crc32c_of(tensor: torch.Tensor) -> str:
    return crc32c_hex(tensor_bytes(tensor))


def crc32c_of_many(tensors: Mapping[_Name, torch.Tensor], known: Mapping[tuple[int, int], str] | None = None) -> dict[_Name, str]:
    """CRC32C of every tensor; large ones in threads, since crc32c releases the GIL on big buffers.

    `known` holds CRC32Cs already taken of whole storages, by (address, size in bytes): a tensor
    that is all of such a storage takes its value instead of reading the bytes again."""
    digests = {name: value for name, tensor in tensors.items() if (value := _known_crc32c(tensor, known or {})) is not None}
    rest = {name: tensor for name, tensor in tensors.items() if name not in digests}
    big = [name for name, tensor in rest.items() if _nbytes(tensor) >= _PARALLEL_BYTES]
    digests.update((name, crc32c_of(tensor)) for name, tensor in rest.items() if _nbytes(tensor) < _PARALLEL_BYTES)
    if big:
        digests.update(zip(big, digest_pool().map(lambda name: crc32c_of(rest[name]), big)))
    return {name: digests[name] for name in tensors}


def _known_crc32c(tensor: torch.Tensor, known: Mapping[tuple[int, int], str]) -> str | None:
    """The CRC32C in `known` of the storage `tensor` is all of, in the same byte order; None otherwise."""
    if not known or tensor.device.type != "cpu" or tensor.layout is not torch.strided or tensor.is_quantized:
        return None
    storage = tensor.untyped_storage()
    value = known.get((storage.data_ptr(), storage.nbytes()))  # most tensors of a model are in none: asked first
    if value is None or tensor.storage_offset() or storage.nbytes() != _nbytes(tensor):
        return None
    if tensor.is_conj() or tensor.is_neg() or not tensor.is_contiguous():
        return None
    return value


def sha256_of(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _live(value: Any) -> Any:
    """A live value as the plain value it stands for: an OmegaConf container as what it holds,
    a device or dtype by its name (`cpu`, `cuda:0`, `torch.bfloat16`: what adoption reads from the
    pickle too), a 0-d tensor as its item."""
    if _is_omegaconf_container(value):
        return _omegaconf_content(value)
    if isinstance(value, (torch.device, torch.dtype)):
        return str(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() == 0:
        return value.item()
    return value


def hyperparameters_form() -> JsonForm:
    """The walk adapters record live hyper-parameters by (adoption reads the pickled ones by the same)."""
    return JsonForm(_live)


def jsonable(value: Any) -> Any:
    """`value` as JSON data when it is made of scalars, lists, tuples, dicts, OmegaConf containers,
    devices and dtypes (their names) and 0-d tensors; else None. A dict's entries with no JSON
    form are left out; a list or tuple with such an item has none itself.

    Non-finite floats and anything else (callables, modules, big tensors) have no JSON form and give None.
    """
    converted = JsonForm(_live, nodes=sys.maxsize).value(value, "", depth=1)
    return None if isinstance(converted, NoJsonForm) else converted


def omegaconf_content(value: Any) -> Any:
    """The dicts and lists an OmegaConf container holds, unresolved; any other value as it is."""
    return _omegaconf_content(value) if _is_omegaconf_container(value) else value


def _is_omegaconf_container(value: Any) -> bool:
    # Without omegaconf imported, nothing in this process can be one of its containers.
    omegaconf = sys.modules.get("omegaconf")
    return omegaconf is not None and isinstance(value, omegaconf.Container)


def _omegaconf_content(container: Any) -> Any:
    """The dicts and lists a DictConfig or ListConfig holds, `${...}` and `???` as written.

    Reading its items would resolve them: that raises on a missing value and need not give what the
    file holds (environment resolvers), while the manifest records what was saved.
    """
    return sys.modules["omegaconf"].OmegaConf.to_container(container, resolve=False)


def scalar_items(mapping: Mapping[str, Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The entries of `mapping` that have a JSON form, without the keys in `skip`."""
    skipped = set(skip)
    converted = {key: jsonable(value) for key, value in mapping.items() if key not in skipped}
    return {key: value for key, value in converted.items() if value is not None}
