"""Read a legacy (pre-1.6) `torch.save` file without torch and without running its pickles.

    with open_legacy_checkpoint("resnet.pth") as checkpoint:
        for pointer, tensor in checkpoint.tensors():      # "/conv1.weight", TensorRef
            print(pointer, tensor.dtype, tensor.shape, tensor.byte_range)

The file is five pickles back to back, then raw storages: the magic number, the protocol version
(1001), a `sys_info` dict (byte order and C type sizes), the object pickle whose persistent ids name
storages, and the sorted list of storage keys. Each storage follows in that order as an 8-byte
element count (in the writer's byte order) and its bytes. Every pickle goes through the same restricted
unpickler as a zip archive's `data.pkl`: `torch.load` runs each of them, so a global hidden in a header
pickle is reported, never skipped. The object tree and its `TensorRef`s are those of `torchzip`, so
everything that works on a zip archive's tree works here.
"""

from __future__ import annotations

import pickletools
import struct
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from .._storage import Location, location
from ._reader import TensorReader
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._mapped import MappedFile
from ._pickle_safety import PickleReadStopped
from ._zip_records import ArchiveRecord
from ._tree import component_of, iter_tensors, plain_components, resolve_pointer
from .torchzip import _restricted_load, _short, _TensorFactory
from ._tensors import DTYPE_ITEMSIZE, RecordProblem, StorageRef, TensorRef, TorchStorageType

__all__ = ["LEGACY_MAGIC", "LegacyTorchCheckpoint", "inspect_legacy_checkpoint", "open_legacy_checkpoint"]

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_PROTOCOL_VERSION = 1001
_PICKLES = ("magic number", "protocol version", "sys_info", "object", "storage keys")
_COUNT = struct.Struct("<q")
_STORAGE_ROOT = "storages"


class LegacyTorchCheckpoint(TensorReader):
    """An opened legacy torch.save file: the object tree, its tensors and the globals its pickles name.

    Same reading interface as `TorchCheckpoint`; close it (or use `with`) when done reading bytes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = location(path)
        self._storages = _LegacyStorages(self.path)
        try:
            self.tree, self.globals, self.byteorder = self._read()
        except BaseException:
            self._storages.close()
            raise

    def close(self) -> None:
        self._storages.close()

    @property
    def metadata(self) -> dict[str, Any]:
        return {"serialization": "legacy", "byteorder": self.byteorder, "storage_count": len(self._storages.records)}

    def tensors(self) -> Iterator[tuple[str, TensorRef]]:
        return iter_tensors(self.tree, f"{self.path}: pickle 4 of 5 (object)", self.globals)

    def resolve(self, pointer: str) -> Any:
        return resolve_pointer(self.tree, pointer)

    def verify(self, trusted: Collection[str] = ()) -> list[RecordProblem]:
        """Nothing to verify: the legacy format stores no checksums (a manifest's CRC32Cs are the check)."""
        return []

    def _read(self) -> tuple[Any, list[GlobalRef], str]:
        spans = self._storages.pickle_spans(len(_PICKLES))
        magic, protocol, sys_info, keys = (self._header_value(index, spans[index]) for index in (0, 1, 2, 4))
        if magic != LEGACY_MAGIC:
            raise CorruptCheckpointError(f"{self._where(0)}: {_short(magic)} is not torch's magic number")
        if protocol != _PROTOCOL_VERSION:
            raise CorruptCheckpointError(
                f"{self._where(1)}: {_short(protocol)}, not {_PROTOCOL_VERSION}; the file is not a legacy torch.save file"
            )
        byteorder = _byteorder(self._where(2), sys_info)
        main = self._storages.read(*spans[3])
        census = _StorageCensus(self.path)
        _, named = _restricted_load(main, self._where(3), census)
        try:
            self._storages.lay_out(_storage_keys(self._where(4), keys), census.dtypes, sum(spans[4]), byteorder)
            tree, named = _restricted_load(main, self._where(3), _LegacyFactory(self.path, self._storages))
        except CorruptCheckpointError as exc:
            dangerous = [g.qualname for g in named if g.safety == "dangerous"]
            raise PickleReadStopped(f"{exc}; its object pickle names dangerous globals: {', '.join(dangerous)}" if dangerous else str(exc), named) from None
        return tree, named, byteorder

    def _header_value(self, index: int, span: tuple[int, int]) -> Any:
        """A header pickle's value; it holds plain values, so any global there is refused."""
        value, named = _restricted_load(self._storages.read(*span), self._where(index), _TensorFactory(self.path, None))
        if named:
            listed = ", ".join(f"{g.qualname} ({g.safety})" for g in named)
            raise PickleReadStopped(
                f"{self._where(index)} names globals, which torch.save never writes there and torch.load would call: {listed}", named
            )
        return value

    def _where(self, index: int) -> str:
        return f"{self.path}: pickle {index + 1} of {len(_PICKLES)} ({_PICKLES[index]})"


def _byteorder(where: str, sys_info: Any) -> str:
    if not isinstance(sys_info, dict) or not isinstance(sys_info.get("little_endian"), bool):
        raise CorruptCheckpointError(f"{where}: {_short(sys_info)} is not a dict with a boolean 'little_endian'")
    return "little" if sys_info["little_endian"] else "big"


def _storage_keys(where: str, keys: Any) -> list[str]:
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys) or len(set(keys)) != len(keys):
        raise CorruptCheckpointError(f"{where}: {_short(keys)} is not a list of distinct storage keys")
    return keys


class _LegacyStorages(MappedFile):
    """The file mapped once, with each storage's bytes as a record named `data/<key>`."""

    def __init__(self, path: Location) -> None:
        super().__init__(path, _STORAGE_ROOT)

    def pickle_spans(self, count: int) -> list[tuple[int, int]]:
        """`(offset, size)` of the first `count` pickles, walked opcode by opcode up to each STOP."""
        spans, start = [], 0
        for index in range(count):
            end = self._pickle_end(start, index)
            spans.append((start, end - start))
            start = end
        return spans

    def _pickle_end(self, start: int, index: int) -> int:
        where = f"{self.path}: pickle {index + 1} of {len(_PICKLES)} ({_PICKLES[index]})"
        if start >= self.size:
            raise CorruptCheckpointError(f"{where}: missing, the file ends at byte {start}; it is truncated")
        data = self._source.file()
        data.seek(start)
        try:
            for opcode, _argument, _position in pickletools.genops(data):
                if opcode.name == "STOP":
                    return data.tell()
        except (ValueError, struct.error, OverflowError, UnicodeError, EOFError) as exc:
            if data.tell() < self.size:
                raise CorruptCheckpointError(f"{where} at byte {start} cannot be parsed: {exc}") from None
        raise CorruptCheckpointError(f"{where} at byte {start} has no STOP before the end of the file; it is truncated")

    def lay_out(self, keys: list[str], dtypes: dict[str, str], start: int, byteorder: str) -> None:
        """Locate each storage after the key list: its count header must match the bytes present."""
        order = "<" if byteorder == "little" else ">"
        cursor = start
        for key in keys:
            cursor = self._lay_out_one(key, dtypes, cursor, order)
        if cursor != self.size:
            raise CorruptCheckpointError(f"{self.path}: {self.size - cursor} bytes after the last storage (byte {cursor}); torch.save writes none")

    def _lay_out_one(self, key: str, dtypes: dict[str, str], cursor: int, order: str) -> int:
        # The 8-byte headers are read with pread: touching them through the mmap would fault in (and
        # read ahead) pages of every storage, which then count as resident memory.
        if key not in dtypes:
            raise CorruptCheckpointError(f"{self.path}: storage key {key!r} is listed but no tensor of the object pickle uses it")
        header = self._source.pread(cursor, _COUNT.size)
        if len(header) < _COUNT.size:
            raise CorruptCheckpointError(f"{self.path}: storage {key}: its size header at byte {cursor} lies past the end of the file; the file is truncated")
        (count,) = struct.unpack(order + "q", header)
        size = count * DTYPE_ITEMSIZE[dtypes[key]]
        if count < 0 or cursor + _COUNT.size + size > self.size:
            raise CorruptCheckpointError(
                f"{self.path}: storage {key}: its header gives {count} elements of {dtypes[key]} at byte "
                f"{cursor + _COUNT.size}, past the end of the file ({self.size} bytes)"
            )
        self.records[f"data/{key}"] = ArchiveRecord(f"data/{key}", cursor + _COUNT.size, size)
        return cursor + _COUNT.size + size


def _legacy_pid(where: Path, pid: Any) -> tuple[TorchStorageType, str, str, int, Any]:
    if isinstance(pid, tuple) and pid[:1] == ("module",):
        raise UnsupportedFormatError(f"{where}: the object pickle saves a whole module class with its source code; ckptspec reads state dicts")
    if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"):
        raise CorruptCheckpointError(f"{where}: object pickle: persistent id {_short(pid)} is not a legacy torch storage")
    _, storage_type, key, location, numel, view = pid
    if not isinstance(storage_type, TorchStorageType):
        raise CorruptCheckpointError(f"{where}: object pickle: storage {key!r} has unknown type {_short(storage_type)}")
    if not (isinstance(key, str) and isinstance(numel, int) and numel >= 0):
        raise CorruptCheckpointError(f"{where}: object pickle: malformed storage id {_short(pid)}")
    return storage_type, key, str(location), numel, view


class _StorageCensus(_TensorFactory):
    """First reading of the object pickle: each storage key and its element type, nothing else."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, None)
        self.dtypes: dict[str, str] = {}

    def load_storage(self, pid: Any) -> None:
        storage_type, key, _location, _numel, _view = _legacy_pid(self._path, pid)
        if self.dtypes.setdefault(key, storage_type.dtype) != storage_type.dtype:
            raise CorruptCheckpointError(f"{self._path}: object pickle: storage {key!r} is named as both {self.dtypes[key]} and {storage_type.dtype}")


class _LegacyFactory(_TensorFactory):
    """Second reading: persistent ids become `StorageRef`s over the storages the census located."""

    def load_storage(self, pid: Any) -> StorageRef:
        storage_type, key, location, numel, view = _legacy_pid(self._path, pid)
        archive = self._archive
        assert archive is not None
        record = archive.record(f"data/{key}")
        if record is None:
            raise CorruptCheckpointError(f"{self._path}: storage {key!r} is used by the object pickle but missing from the storage key list")
        root = self._storages.setdefault(
            key, StorageRef(key, storage_type.dtype, record.size // DTYPE_ITEMSIZE[storage_type.dtype], location, record, archive)
        )
        if numel != root.numel:
            raise CorruptCheckpointError(f"{self._path}: storage {key}: the object pickle gives {numel} elements, its header {root.numel}")
        return root if view is None else _storage_view(self._path, root, view)


def _storage_view(path: Path, root: StorageRef, view: Any) -> StorageRef:
    """A pre-1.0 storage view: `(view_key, element offset, element count)` into its root storage."""
    if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[0], str) and all(type(v) is int and v >= 0 for v in view[1:])):
        raise CorruptCheckpointError(f"{path}: storage {root.key}: malformed view metadata {_short(view)}")
    key, offset, count = view
    if offset + count > root.numel:
        raise CorruptCheckpointError(f"{path}: storage view {key} ({offset}+{count} elements) lies outside storage {root.key} ({root.numel} elements)")
    itemsize = DTYPE_ITEMSIZE[root.dtype]
    record = ArchiveRecord(root.record.name, root.record.offset + offset * itemsize, count * itemsize)
    return StorageRef(key, root.dtype, count, root.location, record, root.archive)


def open_legacy_checkpoint(path: str | Path) -> LegacyTorchCheckpoint:
    """Open a legacy (pre-1.6) torch.save file and unpickle its pickles safely.

    Raises:
        CorruptCheckpointError: truncated pickles or storages, a wrong protocol version, globals in a
            header pickle, storages the pickles disagree about, bytes after the last storage.
    """
    return LegacyTorchCheckpoint(path)


def inspect_legacy_checkpoint(path: str | Path) -> Inspection:
    """Summarise a legacy torch.save file without reading any tensor bytes."""
    from .lightning import LightningCheckpoint

    with open_legacy_checkpoint(path) as checkpoint:
        metadata = checkpoint.metadata
        lightning = LightningCheckpoint.recognise(checkpoint.tree)
        if lightning is not None:
            components = lightning.components()
            metadata.update(lightning.summary())
        else:
            components = plain_components(checkpoint.tree)
        return Inspection(
            path=str(checkpoint.path),
            format="lightning" if lightning is not None else "torch",
            files=[FileSummary(str(checkpoint.path), checkpoint.path.stat().st_size)],
            tensors=[
                TensorSummary(pointer, t.dtype, t.shape, t.nbytes, component_of(pointer, components))
                for pointer, t in checkpoint.tensors()
            ],
            globals=checkpoint.globals,
            metadata=metadata,
            components=components,
        )

