"""Read a TorchScript archive (`torch.jit.save`) without torch: its tensors, and its program as code.

    with open_torchscript("scripted.pt") as archive:
        for pointer, tensor in archive.tensors():        # "/model/l.weight", TensorRef
            print(pointer, tensor.dtype, tensor.shape)
        archive.program.files                            # ["code/__torch__.py", ...]

The archive is a torch zip: `data.pkl` pickles the module objects (classes under `__torch__`, whose
TorchScript source is in `code/`) with tensors in `data/`; `constants.pkl` pickles the tensors the
code uses as constants, in `constants/`; a traced module may add `traced_inputs.pkl`. Every pickle
goes through the restricted unpickler. A `__torch__` class is classed as allowed only when the archive
holds its source file: the pickle itself cannot run it, but `torch.jit.load` compiles that source and
runs it when the module is called (or restored, through a `__setstate__`), which is why the program
is reported as code and never run. Its records are stored deflated; they are inflated in bounded
chunks only to checksum them.

The tree is `{"model": {name: TensorRef}, "constants": {...}}`, tensor names as `state_dict()` spells
them (`l.weight`), so a TorchScript file and a `state_dict` file of one model compare equal.
"""

from __future__ import annotations

import functools
import hashlib
import re
import zlib
from collections import Counter
from collections.abc import Collection, Generator, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from .._crc32 import crc32
from .._dataclass import dataclass
from .._storage import location
from .._exceptions import CorruptCheckpointError, UnsupportedFormatError
from .._pointer import split_pointer
from ._reader import TensorReader
from ._inspection import FileSummary, GlobalRef, Inspection, TensorSummary
from ._names import TORCHSCRIPT_CONSTANTS
from ._zip_records import ArchiveRecord, ZipArchive
from ._tree import component_of, iter_tensors, plain_components, resolve_pointer
from .torchzip import _restricted_load, _TensorFactory
from ._tensors import RecordProblem, TensorRef

__all__ = ["Program", "ScriptObject", "TorchScriptArchive", "inspect_torchscript", "open_torchscript"]

CODE_FOLDER = "code/"
_PICKLES = {"model": ("data.pkl", "data/"), "constants": (TORCHSCRIPT_CONSTANTS, "constants/")}
_TRACED_INPUTS = "traced_inputs.pkl"
"""A traced module's example inputs: shapes only (torch writes their storages empty), judged for safety."""
_SCRIPT_GLOBAL = re.compile(rb"c(__torch__(?:\.\w+)*)\n(\w+)\n")
_DEFLATED = zlib.DEFLATED
_INFLATE_CHUNK = 1 << 20
_MAX_CODE_RECORD = 64 << 20
"""A code record inflating past this is refused: TorchScript source files are kilobytes."""
_STATE = "__state__"


class ScriptObject(dict):  # type: ignore[type-arg]
    """An object of a TorchScript class: its attributes (the pickle's BUILD state) as a dict.

    NEWOBJ creates it and BUILD fills it; nothing of the class's code exists here to run."""

    qualname: ClassVar[str] = ""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.update(state)
        else:
            self[_STATE] = state


def _script_class(module: str, name: str) -> type[ScriptObject]:
    return type(name, (ScriptObject,), {"qualname": f"{module}.{name}", "__module__": __name__})


def _as_list(values: Any) -> list[Any]:
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"a TorchScript list of {type(values).__name__}")
    return list(values)


def _restore_type_tag(value: Any, type_name: Any) -> Any:
    """`torch.jit._pickle.restore_type_tag`: only annotates a container with its TorchScript type."""
    return value


_JIT_PICKLE_BUILDERS: dict[tuple[str, str], object] = {
    **{("torch.jit._pickle", name): _as_list for name in ("build_intlist", "build_tensorlist", "build_doublelist", "build_boollist")},
    ("torch.jit._pickle", "restore_type_tag"): _restore_type_tag,
}


@dataclass(frozen=True)
class Program:
    """The archive's TorchScript source: the `code/` records and one digest over all of them."""

    files: list[str]
    sha256: str


class _Folder:
    """The archive as a tensor factory sees it, with `data/<key>` looked up in another folder."""

    def __init__(self, archive: ZipArchive, folder: str) -> None:
        self._archive = archive
        self._folder = folder

    def record(self, name: str) -> ArchiveRecord | None:
        return self._archive.record(self._folder + name.removeprefix("data/"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._archive, name)


class TorchScriptArchive(TensorReader):
    """An opened TorchScript archive. Close it (or use `with`) when done reading tensor bytes."""

    def __init__(self, path: str | Path) -> None:
        self.path = location(path)
        self._archive = ZipArchive(self.path)
        try:
            self._require_torchscript()
            self.tree, self.globals, self.root_class = self._unpickle()
        except BaseException:
            self._archive.close()
            raise

    def close(self) -> None:
        self._archive.close()

    @property
    def metadata(self) -> dict[str, Any]:
        version = self._small_record("version") or self._small_record(".data/version")
        return {"archive_root": self._archive.root, "torch_zip_version": version, "byteorder": self._small_record("byteorder") or "little",
                "module_class": self.root_class, "code_files": len(self._code_records())}  # fmt: skip

    def tensors(self) -> Iterator[tuple[str, TensorRef]]:
        return iter_tensors(self.tree, f"{self.path}: data.pkl", self.globals)

    def resolve(self, pointer: str) -> Any:
        return resolve_pointer(self.tree, pointer)

    @functools.cached_property
    def program(self) -> Program:
        """The `code/` records and the SHA-256 over each one's name, a NUL byte and its inflated bytes."""
        digest = hashlib.sha256()
        names = []
        for record in sorted(self._code_records(), key=lambda r: r.name):
            names.append(record.name)
            digest.update(record.name.encode() + b"\0")
            for chunk in self._contents(record):
                digest.update(chunk)
        return Program(names, digest.hexdigest())

    def verify(self, trusted: Collection[str] = ()) -> list[RecordProblem]:
        """Records whose bytes (inflated, for code) no longer have the CRC-32 the zip directory records;
        storage records holding only `trusted` tensors are left to the caller (see `TorchCheckpoint.verify`)."""
        if not self._archive.records_crc32:
            return []
        trusted = frozenset(trusted)
        problems = []
        for record in self._archive.records.values():
            pointers = self._pointers_by_record.get(record.name, ())
            if pointers and trusted.issuperset(pointers):
                continue
            computed = 0
            for chunk in self._contents(record):
                computed = crc32(chunk, computed)
            if computed != record.crc32:
                problems.append(
                    RecordProblem(self.path, f"{self._archive.root}/{record.name}", (record.offset, record.end), record.crc32, computed, pointers)
                )
        return problems

    @functools.cached_property
    def _pointers_by_record(self) -> dict[str, tuple[str, ...]]:
        by_record: dict[str, tuple[str, ...]] = {}
        for pointer, tensor in self.tensors():
            name = tensor.storage.record.name
            by_record[name] = (*by_record.get(name, ()), pointer)
        return by_record

    def _code_records(self) -> list[ArchiveRecord]:
        return [record for name, record in self._archive.records.items() if name.startswith(CODE_FOLDER)]

    def _contents(self, record: ArchiveRecord) -> Iterator[bytes | memoryview]:
        if record.method != _DEFLATED:
            yield from self._archive.stream(record.offset, record.size)
            return
        yield from _inflate(self.path, f"{self._archive.root}/{record.name}", self._archive.stream(record.offset, record.size))

    def _require_torchscript(self) -> None:
        if self._archive.record(_PICKLES["constants"][0]) is None:
            raise UnsupportedFormatError(f"{self.path}: a torch.save archive, not a TorchScript archive (it has no constants.pkl)")
        for record in self._archive.records.values():
            if record.method not in (0, _DEFLATED) or (record.method == _DEFLATED and not record.name.startswith(CODE_FOLDER)):
                raise UnsupportedFormatError(
                    f"{self.path}: record {self._archive.root}/{record.name} is compressed (zip method {record.method}); "
                    "torch.jit.save compresses only code/, so another tool rewrote this archive"
                )

    def _unpickle(self) -> tuple[dict[str, Any], list[GlobalRef], str | None]:
        tree: dict[str, Any] = {}
        named: Counter[tuple[str, str, str]] = Counter()
        roots = {}
        for part, (pickle_name, folder) in _PICKLES.items():
            factory = _TensorFactory(self.path, _Folder(self._archive, folder))  # type: ignore[arg-type]
            roots[part] = self._load(pickle_name, factory, named)
            tree[part] = {".".join(split_pointer(pointer)): tensor for pointer, tensor in iter_tensors(roots[part])}
        if self._archive.record(_TRACED_INPUTS) is not None:
            self._load(_TRACED_INPUTS, _ShapesOnly(self.path, None), named)
        root_class = roots["model"].qualname if isinstance(roots["model"], ScriptObject) else None
        return tree, [GlobalRef(m, n, s, c) for (m, n, s), c in sorted(named.items())], root_class

    def _load(self, pickle_name: str, factory: _TensorFactory, named: Counter[tuple[str, str, str]]) -> Any:
        record = self._archive.record(pickle_name)
        if record is None:
            raise CorruptCheckpointError(f"{self.path}: TorchScript archive without {self._archive.root}/{pickle_name}")
        data = self._archive.read(record.offset, record.size)
        factory.builders.update({**_JIT_PICKLE_BUILDERS, **self._script_classes(data)})
        value, refs = _restricted_load(data, f"{self.path}: {pickle_name}", factory)
        named.update({(ref.module, ref.name, ref.safety): ref.count for ref in refs})
        return value

    def _script_classes(self, data: bytes) -> dict[tuple[str, str], object]:
        """Builders for the `__torch__` classes the pickle names whose source file the archive holds."""
        classes: dict[tuple[str, str], object] = {}
        for module_bytes, name_bytes in _SCRIPT_GLOBAL.findall(data):
            module, name = module_bytes.decode(), name_bytes.decode()
            if self._archive.record(_source_file(module)) is not None:
                classes[(module, name)] = _script_class(module, name)
        return classes

    def _small_record(self, name: str) -> str | None:
        record = self._archive.record(name)
        if record is None or record.size > 256 or record.method != 0:
            return None
        return self._archive.read(record.offset, record.size).decode("utf-8", "replace").strip()


class _ShapesOnly(_TensorFactory):
    """Reads a pickle whose storages hold no bytes: its tensors stay inert stubs, its globals are judged."""

    def load_storage(self, pid: Any) -> None:
        return None


def _source_file(module: str) -> str:
    """`__torch__.torch.nn.modules.linear` → `code/__torch__/torch/nn/modules/linear.py`."""
    return CODE_FOLDER + str(PurePosixPath(*module.split("."))) + ".py"


def _inflate(path: Path, name: str, chunks: Generator[memoryview, None, None]) -> Iterator[bytes]:
    """Raw deflate, inflated a bounded piece at a time (a small record cannot expand without limit)."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    produced = 0
    try:
        for chunk in chunks:
            pending = bytes(chunk)
            while pending:
                piece = inflater.decompress(pending, _INFLATE_CHUNK)
                pending = inflater.unconsumed_tail
                produced += len(piece)
                if produced > _MAX_CODE_RECORD:
                    raise CorruptCheckpointError(f"{path}: record {name} inflates past {_MAX_CODE_RECORD} bytes; TorchScript code is far smaller")
                yield piece
        yield inflater.flush()
    except zlib.error as exc:
        raise CorruptCheckpointError(f"{path}: record {name} is not valid deflate data ({exc})") from None
    finally:
        chunks.close()  # release the mapped view now: the archive may be closed while the error propagates


def open_torchscript(path: str | Path) -> TorchScriptArchive:
    """Open a TorchScript archive and unpickle its pickles safely.

    Raises:
        UnsupportedFormatError: not a TorchScript archive, or records compressed that torch stores.
        CorruptCheckpointError: truncated, bad zip directory, missing or short records, bad pickles.
    """
    return TorchScriptArchive(path)


def inspect_torchscript(path: str | Path) -> Inspection:
    """Summarise a TorchScript archive without reading tensor bytes or inflating its code."""
    with open_torchscript(path) as archive:
        components = plain_components(archive.tree)
        return Inspection(
            path=str(archive.path),
            format="torchscript",
            files=[FileSummary(str(archive.path), archive.path.stat().st_size)],
            tensors=[TensorSummary(p, t.dtype, t.shape, t.nbytes, component_of(p, components)) for p, t in archive.tensors()],
            globals=archive.globals,
            metadata=archive.metadata,
            components=components,
        )
