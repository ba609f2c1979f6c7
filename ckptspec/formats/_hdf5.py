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

import contextlib
import dataclasses
import io
import json
import mmap
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, NoReturn, TypeVar

from .._dataclass import dataclass
from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError

__all__ = ["HDF5_MAGIC", "Hdf5Dataset", "isolated", "read_hdf5"]

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


def read_hdf5(data: mmap.mmap, start: int, size: int, label: str, *, model_config: bool = False) -> tuple[list[Hdf5Dataset], str | None]:
    """Every dataset of the HDF5 file occupying `data[start:start + size]`, in path order, and with
    `model_config` the root group's `model_config` attribute (the model's JSON config that a legacy
    Keras `.h5` model save keeps there; None for a weights-only file), read only once its stored size
    shows it lies within the file.

    `label` names the file (and member) in errors. Raises `ReaderError` for anything refused or
    unreadable, `UnsupportedFormatError` when h5py is not installed."""
    h5py = _require_h5py(label)
    if size < len(HDF5_MAGIC) or data[start : start + len(HDF5_MAGIC)] != HDF5_MAGIC:
        raise UnsupportedFormatError(f"{label}: not an HDF5 file (no HDF5 signature at its start)")

    def read() -> tuple[list[dict[str, Any]], str | None]:
        try:
            with h5py.File(_Window(data, start, size), "r") as handle:
                datasets = [_plain(dataset) for dataset in _Walk(handle, size, label).datasets()]
                return datasets, _model_config(handle, size, label) if model_config else None
        except ReaderError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            raise CorruptCheckpointError(f"{label}: malformed HDF5 structure: {_reason(exc)}") from None

    # A dataset's JSON is a few times the bytes of its object header, a compact one's data twice its size in hex.
    answer_bytes = 8 * size + (1 << 20)
    datasets, text = isolated(read, label, answer_bytes=answer_bytes) if isinstance(data, mmap.mmap) else read()
    return [_dataset(plain) for plain in datasets], text


def _model_config(handle: Any, size: int, label: str) -> str | None:
    from h5py import h5a

    if not h5a.exists(handle.id, _MODEL_CONFIG):
        return None
    if h5a.open(handle.id, _MODEL_CONFIG).get_storage_size() > size:
        raise CorruptCheckpointError(f"{label}: the model_config attribute claims more bytes than the file holds")
    value = handle.attrs[_MODEL_CONFIG.decode()]
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not isinstance(text, str):
        raise CorruptCheckpointError(f"{label}: the model_config attribute is not text")
    return text


ANSWER_SECONDS = 60
"""How long the HDF5 library may take over one file's structure (metadata only: well under a second
for real files) before the file is taken for one that makes it loop, as some malformed heaps do."""
_ERRORS = {error.__name__: error for error in (ReaderError, CorruptCheckpointError, UnsupportedFormatError)}
T = TypeVar("T")


def isolated(read: Callable[[], T], label: str, *, answer_bytes: int, seconds: float = ANSWER_SECONDS) -> T:
    """`read()`, which parses untrusted bytes with the HDF5 library, run in a forked child. A malformed
    heap or B-tree can make the library follow a wild pointer: the child dies of it, and the file is
    then an error naming it, not the end of an audit of thousands; a child still reading after
    `seconds` is stopped, and the file is an error too, as is an answer longer than `answer_bytes` or
    not in the form the child writes (a child that corrupted memory is held to what the file could
    describe). `read` returns JSON data, and reads only what
    the child inherits (a mapped file; not a remote store, whose requests run on threads the child
    does not have)."""
    if not hasattr(os, "fork"):
        return read()
    try:
        receiving, sending = os.pipe()
    except OSError as exc:
        raise _no_child(label, exc) from None
    try:
        child = _fork()
    except OSError as exc:
        os.close(receiving)
        os.close(sending)
        raise _no_child(label, exc) from None
    if child == 0:
        os.close(receiving)
        _answer(read, sending)
    os.close(sending)
    try:
        answer = _receive(receiving, label, seconds, answer_bytes)
    finally:
        os.close(receiving)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        _, status = os.waitpid(child, 0)
    outcome = _outcome(answer)
    if outcome is None:
        crash = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        raise CorruptCheckpointError(f"{label}: malformed HDF5 structure: the HDF5 library crashed reading it ({crash})")
    if "error" in outcome:
        raise _ERRORS[outcome["error"]](outcome["message"])
    if "internal" in outcome:
        raise RuntimeError(outcome["internal"])
    return outcome["value"]  # type: ignore[no-any-return]


def _no_child(label: str, error: OSError) -> ReaderError:
    # Out of descriptors, processes or memory: the host's limit, not the file's fault.
    return ReaderError(f"{label}: cannot read: no process could be started to parse its HDF5 structure ({error.strerror})")


def _fork() -> int:
    # h5py makes every HDF5 call under this lock: holding it while forking means no other thread of
    # this process is inside the library, whose state the child inherits, nor holds the lock that
    # the child's own calls take.
    from h5py._objects import phil

    with phil:
        return os.fork()


def _answer(read: Callable[[], Any], sending: int) -> NoReturn:
    """The child's whole life: the outcome of `read`, as JSON down the pipe, then exit without
    running anything the parent registered to run at its own exit."""
    try:
        try:
            outcome = {"value": read()}
        except ReaderError as exc:
            outcome = {"error": type(exc).__name__ if type(exc).__name__ in _ERRORS else "ReaderError", "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - reported in the parent, as it would have been raised there
            outcome = {"internal": f"{type(exc).__name__}: {exc}"}
        payload = memoryview(json.dumps(outcome).encode())
        while payload:
            payload = payload[os.write(sending, payload) :]
    finally:
        os._exit(0)


def _receive(receiving: int, label: str, seconds: float, most: int) -> bytes:
    parts, received, deadline = [], 0, time.monotonic() + seconds
    waiting = select.poll()  # not select(): descriptors past 1023 are out of its range
    waiting.register(receiving, select.POLLIN)
    while True:
        if not waiting.poll(max(0.0, deadline - time.monotonic()) * 1000):
            raise CorruptCheckpointError(
                f"{label}: malformed HDF5 structure: the HDF5 library had not finished reading it after {seconds:g} s"
            )
        part = os.read(receiving, 1 << 16)
        if not part:
            return b"".join(parts)
        received += len(part)
        if received > most:
            raise CorruptCheckpointError(
                f"{label}: malformed HDF5 structure: the HDF5 library's account of it ran past {most} bytes, more than the file could describe"
            )
        parts.append(part)


def _outcome(answer: bytes) -> dict[str, Any] | None:
    """The child's outcome; None when it died before writing all of it, or wrote something else."""
    try:
        outcome = json.loads(answer)
    except (ValueError, RecursionError):
        return None
    if not isinstance(outcome, dict) or len(outcome) not in (1, 2):
        return None
    if "error" in outcome:
        return outcome if outcome["error"] in _ERRORS and isinstance(outcome.get("message"), str) else None
    return outcome if len(outcome) == 1 and ("value" in outcome or isinstance(outcome.get("internal"), str)) else None


def _plain(dataset: Hdf5Dataset) -> dict[str, Any]:
    plain = dataclasses.asdict(dataset)
    plain["inline"] = dataset.inline.hex() if dataset.inline is not None else None
    return plain


def _dataset(plain: dict[str, Any]) -> Hdf5Dataset:
    inline = bytes.fromhex(plain["inline"]) if plain["inline"] is not None else None
    extents = tuple((offset, size) for offset, size in plain["extents"])
    return Hdf5Dataset(plain["path"], plain["dtype"], tuple(plain["shape"]), plain["itemsize"], plain["layout"], extents, inline)


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
