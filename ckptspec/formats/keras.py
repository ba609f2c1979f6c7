"""Read Keras 3 native files without Keras or TensorFlow: `.keras` archives and `.weights.h5` files.

A `.keras` file is a zip holding `config.json` (the model's construction config), `metadata.json`
(Keras version, save date) and `model.weights.h5`. Keras stores that member uncompressed, so its HDF5
bytes are read in place from a read-only map of the archive; a `.weights.h5` file is the same HDF5
layout on its own. Weights lie at `layers/<layer>/vars/<i>` (nested layers below their parent),
the model's own at `vars/<i>`, the optimizer's at `optimizer/vars/<i>`.

CRC32C covers each tensor's bytes as stored: for a contiguous dataset (what Keras writes) the raw
row-major values; for a chunked one, its stored chunks in chunk-index order (compressed bytes when
the chunks are filtered), so the checksum matches the file, not the decoded values.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import stat
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from .._crc32 import crc32
from .._dataclass import dataclass
from .. import _crc32c

from .._storage import Location, RemotePath, location
from ._source import RemoteSource
from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from .._pointer import join_pointer
from ._hdf5 import HDF5_MAGIC, Hdf5Dataset, read_hdf5
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from .._pickle_policy import Safety
from ._io import unreadable
from ._zip_directory import central_directory, data_offset
from ._names import ZIP_MAGIC

__all__ = [
    "KerasFile",
    "KerasProblem",
    "KerasTensor",
    "LayerConfig",
    "inspect_keras",
    "is_keras_archive",
    "open_keras",
]

WEIGHTS_MEMBER = "model.weights.h5"
CONFIG_MEMBER = "config.json"
METADATA_MEMBER = "metadata.json"
_JSON_LIMITS = {CONFIG_MEMBER: 16 << 20, METADATA_MEMBER: 1 << 20}
"""The largest JSON member read; Keras writes kilobytes."""
_STREAM_CHUNK = 16 << 20
_DEFLATED = 8
_OPTIMIZER_ROOTS = ("optimizer/", "optimizer_weights/")
_OPERATION_MODULES = ("keras.src.ops.", "keras.ops.")
_LAMBDA_CLASSES = frozenset({"Lambda", "__lambda__"})
"""A Lambda layer or serialized lambda: its config carries Python bytecode that loading runs."""


@dataclass(frozen=True)
class KerasTensor:
    key: str
    """The dataset's HDF5 path, e.g. `layers/dense/vars/0`."""
    dataset: Hdf5Dataset
    component: str

    @property
    def pointer(self) -> str:
        return join_pointer([self.key])


@dataclass(frozen=True)
class LayerConfig:
    """A layer's construction constants from `config.json`: what no weight holds (epsilon, momentum, ...)."""

    path: str
    """Position in the model, `layers.<i>` (input layers not counted), nested as `layers.2.layers.0`."""
    type: str
    """`<module>.<class_name>` as the config names it, e.g. `keras.layers.BatchNormalization`."""
    constants: dict[str, Any]


@dataclass(frozen=True)
class KerasProblem:
    kind: str
    message: str
    pointer: str | None = None


@dataclass
class KerasFile:
    """An opened Keras file: its tensors, config and code references; tensor bytes read on demand."""

    path: Path
    container: str
    """`keras` for a `.keras` archive, `hdf5` for a bare weights file."""
    tensors: dict[str, KerasTensor]
    layers: list[LayerConfig] | None
    code: list[GlobalRef]
    metadata: dict[str, Any]
    _data: mmap.mmap | RemoteSource = field(repr=False)
    _base: int = 0
    _member_crc32: int | None = None
    _member_size: int = 0

    def close(self) -> None:
        self._data.close()

    def __enter__(self) -> KerasFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def byte_ranges(self, tensor: KerasTensor) -> list[tuple[int, int]]:
        """(offset, size) of each stored extent of the tensor in this file (the archive, for a `.keras`);
        empty for a compact dataset, whose bytes live inside HDF5 metadata."""
        return [(self._base + offset, size) for offset, size in tensor.dataset.extents]

    def crc32c(self, tensor: KerasTensor) -> int:
        value = 0
        for chunk in self.stored_bytes(tensor):
            value = _crc32c.crc32c(chunk, value)
        return value

    def sha256(self, tensor: KerasTensor) -> str:
        digest = hashlib.sha256()
        for chunk in self.stored_bytes(tensor):
            digest.update(chunk)
        return digest.hexdigest()

    def stored_bytes(self, tensor: KerasTensor) -> Iterator[memoryview | bytes]:
        """The tensor's stored bytes, a bounded slice at a time, in file order per extent."""
        if self._data.closed:
            raise ReaderError(f"{self.path}: the checkpoint was closed; reopen it to read tensor bytes")
        if tensor.dataset.inline is not None:
            yield tensor.dataset.inline
            return
        for offset, size in self.byte_ranges(tensor):
            yield from self._stream(offset, size)

    def _stream(self, start: int, size: int) -> Iterator[memoryview]:
        if isinstance(self._data, RemoteSource):
            yield from self._data.stream(start, size, _STREAM_CHUNK)
            return
        view = memoryview(self._data)
        try:
            for position in range(start, start + size, _STREAM_CHUNK):
                end = min(position + _STREAM_CHUNK, start + size)
                piece = view[position:end]
                try:
                    yield piece
                finally:
                    piece.release()
                    _drop_pages(self._data, position, end - position)
        finally:
            view.release()

    def verify(self, *, whole_member: bool = True) -> list[KerasProblem]:
        """Damage the file itself can show: tensors Keras never wrote, and (with `whole_member`) a
        weights member whose bytes no longer match the zip's CRC-32."""
        problems = [
            KerasProblem("checkpoint-corrupt", "no stored bytes: the dataset was created but never written", tensor.pointer)
            for tensor in self.tensors.values()
            if tensor.dataset.layout == "unallocated"
        ]
        if whole_member and self._member_crc32 is not None:
            actual = 0
            for chunk in self._stream(self._base, self._member_size):
                actual = crc32(chunk, actual)
            if actual != self._member_crc32:
                problems.append(
                    KerasProblem(
                        "checksum-mismatch",
                        f"{WEIGHTS_MEMBER}: CRC-32 {actual:08x}, the zip directory records {self._member_crc32:08x}",
                    )
                )
        return problems


def _drop_pages(data: mmap.mmap, offset: int, size: int) -> None:
    # Streaming a large tensor must not keep its pages resident: flat memory as files grow.
    if hasattr(mmap, "MADV_DONTNEED"):
        first = offset - offset % mmap.PAGESIZE
        try:
            data.madvise(mmap.MADV_DONTNEED, first, offset + size - first)
        except OSError:
            pass  # only a memory optimisation


def open_keras(path: str | Path) -> KerasFile:
    """Open a `.keras` archive or a `.weights.h5` file; `ReaderError` naming the file and what is wrong."""
    path = location(path)
    data = _map(path)
    try:
        if data[: len(HDF5_MAGIC)] == HDF5_MAGIC:
            return _open_hdf5(path, data)
        if data[: len(ZIP_MAGIC)] == ZIP_MAGIC:
            return _open_archive(path, data)
        raise UnsupportedFormatError(f"{path}: neither a .keras archive nor an HDF5 weights file")
    except BaseException:
        data.close()
        raise


def _map(path: Location) -> mmap.mmap | RemoteSource:
    """The file's bytes: mapped, or read by ranged requests when it is remote."""
    if isinstance(path, RemotePath):
        return RemoteSource(path, "a Keras file")
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ReaderError(f"{path}: not a regular file")
            if os.fstat(handle.fileno()).st_size == 0:
                raise CorruptCheckpointError(f"{path}: empty file")
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except IsADirectoryError:
        raise ReaderError(f"{path}: a directory, not a Keras file") from None
    except OSError as exc:
        raise unreadable(path, exc) from None


def _open_hdf5(path: Path, data: mmap.mmap) -> KerasFile:
    """A weights file, or a legacy `.h5` model save whose root `model_config` holds the model's config
    (with a Lambda layer's bytecode, if it has one)."""
    datasets, text = read_hdf5(data, 0, len(data), str(path), model_config=True)
    if text is None:
        return KerasFile(path, "hdf5", _tensors(datasets), None, [], {}, data)
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptCheckpointError(f"{path}: the model_config attribute is not valid JSON ({str(exc)[:120]})") from None
    return KerasFile(path, "hdf5", _tensors(datasets), model_layers(config), code_references(config), {}, data)


def _open_archive(path: Path, data: mmap.mmap) -> KerasFile:
    members = _members(path, data)
    weights = members.get(WEIGHTS_MEMBER)
    if weights is None or CONFIG_MEMBER not in members:
        raise UnsupportedFormatError(
            f"{path}: a zip archive, but not a .keras file: it lacks {CONFIG_MEMBER} or {WEIGHTS_MEMBER}"
        )
    if weights.compress_type != zipfile.ZIP_STORED:
        raise UnsupportedFormatError(
            f"{path}: {WEIGHTS_MEMBER} is compressed (zip method {weights.compress_type}); Keras stores it "
            "uncompressed, so another tool rewrote this archive; its tensors cannot be read in place"
        )
    start = data_offset(path, data, weights)
    if start + weights.compress_size > len(data):
        raise CorruptCheckpointError(
            f"{path}: {WEIGHTS_MEMBER} ends at byte {start + weights.compress_size}, past the end of the "
            f"file ({len(data)} bytes); the file is truncated"
        )
    datasets, _ = read_hdf5(data, start, weights.compress_size, f"{path}: {WEIGHTS_MEMBER}")
    config = _json_member(path, data, members[CONFIG_MEMBER])
    metadata = _json_member(path, data, members[METADATA_MEMBER]) if METADATA_MEMBER in members else {}
    return KerasFile(
        path,
        "keras",
        _tensors(datasets),
        model_layers(config),
        code_references(config),
        _scalar_metadata(metadata),
        data,
        start,
        weights.CRC,
        weights.compress_size,
    )


def _members(path: Path, data: mmap.mmap) -> dict[str, zipfile.ZipInfo]:
    members: dict[str, zipfile.ZipInfo] = {}
    for info in central_directory(path, data):
        if info.filename in (WEIGHTS_MEMBER, CONFIG_MEMBER, METADATA_MEMBER):
            if info.filename in members:
                raise CorruptCheckpointError(f"{path}: the archive holds {info.filename} twice; which one Keras loads is ambiguous")
            _require_local_name(path, data, info)
        members[info.filename] = info
    return members


def _require_local_name(path: Path, data: mmap.mmap, info: zipfile.ZipInfo) -> None:
    """The member's local header names it as the directory does: a zip whose two names disagree reads
    differently in different tools, the shape of an archive forged to pass one check and load another."""
    start = info.header_offset + 30
    length = int.from_bytes(data[info.header_offset + 26 : start], "little")
    if data[start : start + length] != info.orig_filename.encode("utf-8"):
        raise CorruptCheckpointError(
            f"{path}: {info.filename}: its local header names {bytes(data[start : start + length])[:80]!r}; "
            "the zip directory and the member disagree"
        )


def _json_member(path: Path, data: mmap.mmap, info: zipfile.ZipInfo) -> Any:
    where = f"{path}: {info.filename}"
    limit = _JSON_LIMITS[info.filename]
    if info.file_size > limit or info.compress_size > limit:
        raise CorruptCheckpointError(f"{where}: {info.file_size} bytes, more than the {limit} a Keras file needs")
    start = data_offset(path, data, info)
    raw = data[start : start + info.compress_size]
    if len(raw) < info.compress_size:
        raise CorruptCheckpointError(f"{where}: truncated ({len(raw)} of {info.compress_size} bytes present)")
    text = _inflate(where, raw, info.compress_type, limit)
    if crc32(text) != info.CRC:
        raise CorruptCheckpointError(f"{where}: CRC-32 {crc32(text):08x}, the zip directory records {info.CRC:08x}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptCheckpointError(f"{where}: not valid JSON ({str(exc)[:120]})") from None


def _inflate(where: str, raw: bytes, method: int, limit: int) -> bytes:
    if method == zipfile.ZIP_STORED:
        return raw
    if method != _DEFLATED:
        raise UnsupportedFormatError(f"{where}: zip compression method {method}; ckptspec reads stored and deflated members")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        text = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise CorruptCheckpointError(f"{where}: bad deflate data ({exc})") from None
    if len(text) > limit:
        raise CorruptCheckpointError(f"{where}: inflates to more than {limit} bytes")
    return text


def _tensors(datasets: list[Hdf5Dataset]) -> dict[str, KerasTensor]:
    return {
        dataset.path: KerasTensor(
            dataset.path, dataset, "optimizer" if dataset.path.startswith(_OPTIMIZER_ROOTS) else "model"
        )
        for dataset in datasets
    }


def _scalar_metadata(metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        return {}
    return {
        str(key)[:64]: value[:200] if isinstance(value, str) else value
        for key, value in metadata.items()
        if isinstance(value, (str, int, float, bool))
    }


# --------------------------------------------------------------------------------------------------
# config.json


def model_layers(config: Any) -> list[LayerConfig]:
    """The model and its layers, parents first, with their scalar constants (the config's `name` aside)."""
    layers: list[LayerConfig] = []
    pending: list[tuple[str, Any]] = [("", config)]
    while pending:
        path, entry = pending.pop(0)
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            continue
        settings = entry["config"]
        layers.append(LayerConfig(path, _type_name(entry), _constants(settings)))
        children = [child for child in settings.get("layers", []) if _is_layer(child)]
        prefix = f"{path}.layers" if path else "layers"
        pending[:0] = [(f"{prefix}.{index}", child) for index, child in enumerate(children)]
    return layers


def _is_layer(entry: Any) -> bool:
    """Whether a functional model's config entry is a layer the model holds, and so has a position:
    not an input, and not an operation applied to tensors (`x + y` records `keras.src.ops.numpy.Add`)."""
    if not isinstance(entry, dict) or entry.get("class_name") == "InputLayer":
        return False
    module = entry.get("module")
    return not (isinstance(module, str) and module.startswith(_OPERATION_MODULES))


def _type_name(entry: dict[str, Any]) -> str:
    module = entry.get("module") if isinstance(entry.get("module"), str) else None
    name = str(entry.get("class_name"))
    return f"{module}.{name}" if module else name


def _constants(settings: dict[str, Any]) -> dict[str, Any]:
    constants = {}
    for key, value in settings.items():
        if key == "name":
            continue
        if _is_dtype_policy(value):
            constants[key] = value["config"]["name"]
        elif _is_scalar(value) or (isinstance(value, list) and all(_is_scalar(item) for item in value)):
            constants[key] = value
    return constants


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _is_dtype_policy(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("class_name") == "DTypePolicy"
        and isinstance(value.get("config"), dict)
        and isinstance(value["config"].get("name"), str)
    )


def code_references(config: Any) -> list[GlobalRef]:
    """Every class or function `config.json` makes Keras import, classed like pickle globals: Keras'
    own are allowed, a Lambda layer or serialized lambda is code (dangerous), anything else is unknown."""
    counts: dict[tuple[str, str, Safety], int] = {}
    for entry in _objects(config):
        module, name, registered = entry.get("module"), entry.get("class_name"), entry.get("registered_name")
        if not isinstance(name, str) or not isinstance(module, (str, type(None))):
            continue
        # Without a module Keras looks the name up among its own objects, or among registered custom ones.
        shown = module or (registered if isinstance(registered, str) else "keras")
        reference = (shown, name, _safety(module, name, entry))
        counts[reference] = counts.get(reference, 0) + 1
    return [GlobalRef(module, name, safety, count) for (module, name, safety), count in sorted(counts.items())]


def _safety(module: str | None, name: str, entry: dict[str, Any]) -> Safety:
    if name in _LAMBDA_CLASSES:
        return "dangerous"
    if module is not None and (module == "keras" or module.startswith("keras.")):
        return "allowed"
    if module is None and entry.get("registered_name") is None:
        return "allowed"  # a plain config dict naming a built-in (Keras resolves it in its own namespace)
    return "dangerous"  # a class from outside Keras: loading the model imports and builds it


def _objects(config: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `config`, walked iteratively so that deep nesting cannot exhaust the stack."""
    pending = [config]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            yield value
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)


# --------------------------------------------------------------------------------------------------
# detection and inspection


def is_keras_archive(path: Path, data: mmap.mmap) -> bool:
    """Whether the zip mapped in `data` is a .keras archive (config.json and model.weights.h5 at its top)."""
    try:
        names = {info.filename for info in central_directory(path, data)}
    except ReaderError:
        return False
    return {CONFIG_MEMBER, WEIGHTS_MEMBER} <= names


def inspect_keras(path: str | Path) -> Inspection:
    with open_keras(path) as keras_file:
        tensors = [
            TensorSummary(t.pointer, t.dataset.dtype, t.dataset.shape, t.dataset.nbytes, t.component)
            for t in keras_file.tensors.values()
        ]
        components = {"model": ""}
        if any(t.component == "optimizer" for t in tensors):
            components["optimizer"] = "/optimizer"
        return Inspection(
            path=str(keras_file.path),
            format="keras",
            files=[FileSummary(str(keras_file.path), keras_file.path.stat().st_size)],
            tensors=tensors,
            globals=keras_file.code,
            metadata={"container": keras_file.container, **keras_file.metadata},
            components=components,
        )
