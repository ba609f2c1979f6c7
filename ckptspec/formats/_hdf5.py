"""Walk an HDF5 file from untrusted bytes and list its datasets with where their stored bytes lie.

The HDF5 C library (through h5py) parses the structure; ckptspec never lets it reach outside the
bytes it was given: links to other files, soft links, datasets whose data live in external files and
virtual datasets are refused before anything is read through them, attributes are never read
(except the short `dtype` name Keras gives opaque bfloat16 and float8 datasets, and a legacy model
save's `model_config`, once its stored size shows it lies within the file), and the walk stops once
it has visited more objects than the bytes present could describe. Tensor bytes are never read
here: each dataset's stored extents are recorded, and the caller streams them.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError

if TYPE_CHECKING:
    import mmap

__all__ = ["HDF5_MAGIC", "Hdf5Dataset", "read_datasets", "read_model_config"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_MIN_OBJECT_BYTES = 16
"""No HDF5 object header is smaller, so a file of N bytes describes at most N / 16 objects."""
_COMPACT_LIMIT = 64 << 10
"""HDF5 keeps compact data inside the object header, which is never larger than 64 KiB."""

Layout = Literal["contiguous", "chunked", "compact", "unallocated"]


@dataclass(frozen=True)
class Hdf5Dataset:
    """One dataset: its path, element type and shape, and its stored bytes as (offset, size) extents
    relative to the start of the HDF5 bytes (one extent when contiguous, one per chunk when chunked)."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    itemsize: int
    layout: Layout
    extents: tuple[tuple[int, int], ...] = ()
    inline: bytes | None = None
    """The data of a compact dataset, which lives in its object header rather than at an offset."""

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.itemsize

    @property
    def stored_size(self) -> int:
        return len(self.inline) if self.inline is not None else sum(size for _, size in self.extents)


def read_datasets(data: mmap.mmap, start: int, size: int, label: str) -> list[Hdf5Dataset]:
    """Every dataset of the HDF5 file occupying `data[start:start + size]`, in path order.

    `label` names the file (and member) in errors. Raises `ReaderError` for anything refused or
    unreadable, `UnsupportedFormatError` when h5py is not installed."""
    h5py = _require_h5py(label)
    if size < len(HDF5_MAGIC) or data[start : start + len(HDF5_MAGIC)] != HDF5_MAGIC:
        raise UnsupportedFormatError(f"{label}: not an HDF5 file (no HDF5 signature at its start)")
    try:
        with h5py.File(_Window(data, start, size), "r") as handle:
            return _Walk(handle, size, label).datasets()
    except ReaderError:
        raise
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpointError(f"{label}: malformed HDF5 structure: {_reason(exc)}") from None


def read_model_config(data: mmap.mmap, start: int, size: int, label: str) -> str | None:
    """The `model_config` attribute of the file's root group (the model's JSON config that a legacy
    Keras `.h5` model save keeps there), or None for a weights-only file. Read only once its stored
    size shows it lies within the file; `ReaderError` as for `read_datasets`."""
    h5py = _require_h5py(label)
    from h5py import h5a

    try:
        with h5py.File(_Window(data, start, size), "r") as handle:
            if not h5a.exists(handle.id, _MODEL_CONFIG):
                return None
            if h5a.open(handle.id, _MODEL_CONFIG).get_storage_size() > size:
                raise CorruptCheckpointError(f"{label}: the model_config attribute claims more bytes than the file holds")
            value = handle.attrs[_MODEL_CONFIG.decode()]
    except ReaderError:
        raise
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpointError(f"{label}: malformed HDF5 structure: {_reason(exc)}") from None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not isinstance(text, str):
        raise CorruptCheckpointError(f"{label}: the model_config attribute is not text")
    return text


_MODEL_CONFIG = b"model_config"


def _require_h5py(label: str) -> Any:
    try:
        import h5py
    except ImportError:
        raise UnsupportedFormatError(
            f"{label}: reading HDF5 (Keras) files needs h5py: pip install 'ckptspec[keras]'"
        ) from None
    return h5py


def _natural(path: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts `vars/2` before `vars/10`, as Keras numbers them."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in path.split("/"))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


class _Walk:
    def __init__(self, handle: Any, size: int, label: str) -> None:
        from h5py import h5d, h5i, h5l, h5t

        self.h5d, self.h5i, self.h5l, self.h5t = h5d, h5i, h5l, h5t
        self.root = handle.id
        self.size = size
        self.label = label
        self.budget = size // _MIN_OBJECT_BYTES + 1
        self.seen: set[int] = set()

    def datasets(self) -> list[Hdf5Dataset]:
        found = [self._dataset(path, dsid) for path, dsid in self._objects()]
        return sorted(found, key=lambda dataset: _natural(dataset.path))

    def _objects(self) -> Iterator[tuple[str, Any]]:
        """(path, dataset id) of every dataset, groups walked iteratively, each object once."""
        from h5py import h5o

        pending: list[tuple[str, Any]] = [("", self.root)]
        while pending:
            prefix, group = pending.pop()
            for name in self._link_names(prefix, group):
                path = f"{prefix}{name.decode('utf-8', 'replace')}"
                self._require_hard_link(group, name, path)
                child = h5o.open(group, name)
                address = h5o.get_info(child).addr
                if address in self.seen:
                    continue  # a second hard link to an object already listed
                self.seen.add(address)
                kind = self.h5i.get_type(child)
                if kind == self.h5i.GROUP:
                    pending.append((path + "/", child))
                elif kind == self.h5i.DATASET:
                    yield path, child

    def _link_names(self, prefix: str, group: Any) -> list[bytes]:
        names: list[bytes] = []
        for name in group:
            self.budget -= 1
            if self.budget < 0:
                raise CorruptCheckpointError(
                    f"{self.label}: more HDF5 links than {self.size} bytes can describe (at {prefix or '/'}); "
                    "the structure loops or is forged"
                )
            names.append(name)
        return names

    def _require_hard_link(self, group: Any, name: bytes, path: str) -> None:
        link_type = group.links.get_info(name).type
        if link_type == self.h5l.TYPE_HARD:
            return
        what = {self.h5l.TYPE_EXTERNAL: "an external link (to another file)", self.h5l.TYPE_SOFT: "a soft link"}
        raise ReaderError(
            f"{self.label}: {path} is {what.get(link_type, 'a user-defined link')}; refused: a checkpoint's "
            "objects must all live in the file itself"
        )

    def _dataset(self, path: str, dsid: Any) -> Hdf5Dataset:
        plist = dsid.get_create_plist()
        layout = plist.get_layout()
        if plist.get_external_count() > 0:
            raise ReaderError(f"{self.label}: {path}: its data live in external files; refused")
        if layout == self.h5d.VIRTUAL:
            raise ReaderError(f"{self.label}: {path}: a virtual dataset (its data live in other datasets or files); refused")
        dtype, itemsize = self._dtype(path, dsid)
        shape = tuple(int(dim) for dim in dsid.shape)
        if layout == self.h5d.CONTIGUOUS:
            return self._contiguous(path, dsid, dtype, shape, itemsize)
        if layout == self.h5d.CHUNKED:
            return Hdf5Dataset(path, dtype, shape, itemsize, "chunked", self._chunks(path, dsid))
        if layout == self.h5d.COMPACT:
            return Hdf5Dataset(path, dtype, shape, itemsize, "compact", inline=self._compact(path, dsid, shape, itemsize))
        raise ReaderError(f"{self.label}: {path}: unknown HDF5 storage layout {layout}")

    def _contiguous(self, path: str, dsid: Any, dtype: str, shape: tuple[int, ...], itemsize: int) -> Hdf5Dataset:
        dataset = Hdf5Dataset(path, dtype, shape, itemsize, "contiguous")
        offset = dsid.get_offset()
        if offset is None:
            if dataset.nbytes:
                return Hdf5Dataset(path, dtype, shape, itemsize, "unallocated")
            return dataset
        self._require_inside(path, offset, dataset.nbytes)
        return Hdf5Dataset(path, dtype, shape, itemsize, "contiguous", ((offset, dataset.nbytes),))

    def _chunks(self, path: str, dsid: Any) -> tuple[tuple[int, int], ...]:
        count = dsid.get_num_chunks()
        if count > self.size:
            raise CorruptCheckpointError(f"{self.label}: {path}: {count} chunks cannot fit in {self.size} bytes")
        extents = []
        for index in range(count):
            info = dsid.get_chunk_info(index)
            self._require_inside(path, info.byte_offset, info.size)
            extents.append((int(info.byte_offset), int(info.size)))
        return tuple(extents)

    def _compact(self, path: str, dsid: Any, shape: tuple[int, ...], itemsize: int) -> bytes:
        import h5py

        nbytes = Hdf5Dataset(path, "", shape, itemsize, "compact").nbytes
        if nbytes > _COMPACT_LIMIT:
            raise CorruptCheckpointError(f"{self.label}: {path}: compact dataset of {nbytes} bytes (HDF5 allows 64 KiB)")
        return bytes(h5py.Dataset(dsid)[()].tobytes())

    def _opaque_dtype(self, dsid: Any) -> str | None:
        """The element type named by an opaque dataset's `dtype` attribute: the one attribute ever read,
        and only once its stored size shows it is a short name."""
        import h5py
        from h5py import h5a

        if not h5a.exists(dsid, _DTYPE_ATTRIBUTE):
            return None
        if h5a.open(dsid, _DTYPE_ATTRIBUTE).get_storage_size() > _DTYPE_ATTRIBUTE_LIMIT:
            return None
        value = h5py.Dataset(dsid).attrs[_DTYPE_ATTRIBUTE.decode()]
        name = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        return name if isinstance(name, str) and name in _OPAQUE_DTYPES else None

    def _require_inside(self, path: str, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise CorruptCheckpointError(
                f"{self.label}: {path}: stored bytes {offset}..{offset + size} lie past the end of the "
                f"HDF5 data ({self.size} bytes); the file is truncated"
            )

    def _dtype(self, path: str, dsid: Any) -> tuple[str, int]:
        h5t, type_id = self.h5t, dsid.get_type()
        kind, size = type_id.get_class(), type_id.get_size()
        if kind == h5t.OPAQUE and (named := self._opaque_dtype(dsid)) is not None and _OPAQUE_DTYPES[named] == size:
            return named, size
        if kind == h5t.ENUM and size == 1 and _is_bool_enum(type_id):
            return "bool", 1
        if kind == h5t.FLOAT and size in (2, 4, 8):
            return f"float{size * 8}", size
        if kind == h5t.INTEGER and size in (1, 2, 4, 8):
            signed = type_id.get_sign() == h5t.SGN_2
            return f"{'int' if signed else 'uint'}{size * 8}", size
        raise UnsupportedFormatError(
            f"{self.label}: {path}: element type is not a number ({_TYPE_CLASSES.get(kind, kind)}, {size} bytes); "
            "ckptspec reads numeric tensors"
        )


_OPAQUE_DTYPES = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e4m3b11fnuz": 1,
    "float8_e8m0fnu": 1,
    "int4": 1,
    "uint4": 1,
}
"""Element types HDF5 has no type for: Keras stores them as opaque bytes with a `dtype` attribute naming them."""
_DTYPE_ATTRIBUTE = b"dtype"
_DTYPE_ATTRIBUTE_LIMIT = 64


_TYPE_CLASSES = {0: "integer", 1: "float", 2: "time", 3: "string", 4: "bitfield", 5: "opaque", 6: "compound", 7: "reference", 8: "enum", 9: "variable-length", 10: "array"}


def _is_bool_enum(type_id: Any) -> bool:
    """h5py stores NumPy booleans as an 8-bit enum with the members FALSE = 0 and TRUE = 1."""
    if type_id.get_nmembers() != 2:
        return False
    return {type_id.get_member_name(0), type_id.get_member_name(1)} == {b"FALSE", b"TRUE"}


class _Window(io.RawIOBase):
    """A read-only file over `data[start:start + size]`, so that h5py sees only the HDF5 bytes."""

    def __init__(self, data: mmap.mmap, start: int, size: int) -> None:
        self._data = data
        self._start = start
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self._size - self._position))
        begin = self._start + self._position
        view[:count] = self._data[begin : begin + count]
        self._position += count
        return count
