"""Open the containers a loader unpickles from, bounded, and judge every pickle inside them.

A container is a file that is no checkpoint of its own but holds pickles a loader runs: a NumPy
`.npy` array of objects and `.npz` archives of them (`numpy.load(allow_pickle=True)`), a zip archive
that is no torch archive (`model/x.pkl`, `data.pkl` at its root, zips inside zips), a compressed
stream (gzip, bz2, xz, zlib, as joblib writes) and archives ckptspec has no reader for (7z, lz4,
zstd). Each member a loader would unpickle is judged with the same restricted walk as any pickle,
and named under the container's name: `a.npz!arr_0.npy`, `b.zip!inner.zip!x.pkl`.

Work is bounded by fixed caps, never by a count or size the file states: members per archive,
nesting depth, bytes inflated per member and in all, and the ratio of inflated to stored bytes.
A container past a cap, or one that cannot be opened (a 7z archive, an encrypted member, a
compression method Python lacks), is refused with the reason named: it cannot be judged safe.
"""

from __future__ import annotations

import bz2
import io
import lzma
import pickle
import pickletools
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._exceptions import CkptspecError
from ._inspection import FileSummary, GlobalRef, Inspection
from ._io import unreadable
from ._npy import NPY_HEADER_LIMIT, NPY_MAGIC, NpyHeaderError, read_npy_header

__all__ = [
    "INFLATED_LIMIT",
    "MEMBER_BYTES_LIMIT",
    "MEMBER_COUNT_LIMIT",
    "NESTING_LIMIT",
    "RATIO_LIMIT",
    "Container",
    "JudgedMember",
    "appended_zip",
    "container_kind",
    "has_zip_end",
    "inspect_container",
    "open_container",
]

MEMBER_COUNT_LIMIT = 65_536
"""Members one archive may list; more is refused (numpy.savez of that many arrays is no model)."""
MEMBER_BYTES_LIMIT = 64 << 20
"""Bytes of one member that are inflated and judged; a pickle larger than that is refused."""
INFLATED_LIMIT = 128 << 20
"""Bytes inflated across one container and everything inside it."""
NESTING_LIMIT = 4
"""Containers inside containers: `a.zip!b.zip!c.zip!d.gz` is as deep as is opened."""
RATIO_LIMIT = 1100
"""Deflate cannot inflate more than about 1 032 times what it stores: a member that claims more past
a megabyte is a bomb or damage, refused either way."""
_RATIO_FLOOR = 1 << 20

_SEVEN_ZIP_MAGIC = b"7z\xbc\xaf\x27\x1c"
_ZIP_MAGIC = b"PK\x03\x04"
_EMPTY_ZIP = b"PK\x05\x06"
_UNREADABLE_STREAMS = ((_SEVEN_ZIP_MAGIC, "7z archive"), (b"\x04\x22\x4d\x18", "lz4 stream"),
                       (b"\x28\xb5\x2f\xfd", "zstd stream"), (b"ZF", "joblib zfile stream"))  # fmt: skip
"""Containers the core install has no reader for: cannot be inspected, judged unsafe."""
_ZIP_END_SEARCH = 22 + 0xFFFF
_TAR_MAGIC_AT, _TAR_MAGIC_END = 257, 262
_LEGACY_TAR_STREAMS = frozenset({"storages", "tensors"})
"""Members of torch's legacy tar format holding pickles with raw storage bytes between them."""
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".dill", ".p", ".data")


@dataclass
class JudgedMember:
    """A pickle inside a container, judged."""

    name: str
    """`container!member`, every level named."""
    globals: list[GlobalRef]
    problem: str | None = None
    """Why the restricted walk stopped before the pickle's end (the globals are those named before)."""


@dataclass
class Container:
    path: Path
    description: str
    members: list[JudgedMember] = field(default_factory=list)
    refusal: str | None = None
    """Why (part of) the container cannot be judged: `b.zip!c.7z: cannot be inspected: 7z archive`."""
    refusal_kind: str | None = None
    """`uninspectable` (no reader, encrypted, unknown method) or `bounds` (a cap reached)."""
    refused_at: str | None = None
    """The container or member the refusal is about, named like a member."""

    @property
    def globals(self) -> list[GlobalRef]:
        return [used for member in self.members for used in member.globals]


class _Refused(Exception):
    def __init__(self, where: str, reason: str, kind: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.kind, self.where = kind, where


def container_kind(head: bytes, name: str = "") -> str | None:
    """What container the bytes `head` of the file `name` open (None: none): the description messages use."""
    if head.startswith(_ZIP_MAGIC) and name.endswith(".npz"):
        return "a NumPy .npz archive (numpy.load(allow_pickle=True) unpickles its arrays of objects)"
    if head.startswith(NPY_MAGIC):
        return "a NumPy .npy array of Python objects, stored as a pickle (numpy.load(allow_pickle=True) runs it)"
    if head.startswith((_ZIP_MAGIC, _EMPTY_ZIP)):
        return "a zip archive that is no torch archive (loaders unpickle the pickles it holds)"
    if head.startswith(_SEVEN_ZIP_MAGIC):
        return "a 7z archive"
    if _is_tar(head):
        return "a tar archive (torch.load reads the legacy format of torch < 0.4 from one: storages, tensors, pickle)"
    if _compression(head) is not None or any(head.startswith(magic) for magic, _ in _UNREADABLE_STREAMS):
        return "a compressed stream (joblib and other loaders decompress and unpickle such files)"
    return None


def open_container(path: Path) -> Container:
    """Open the container at `path` and judge every pickle a loader would unpickle from it."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_TAR_MAGIC_END)
            handle.seek(0)
            container = Container(path, container_kind(head, path.name) or "a file")
            budget = _Budget()
            try:
                if container_kind(head, path.name) is None and has_zip_end(path):
                    container.description = "bytes followed by a zip archive (zipfile and torch's reader accept the prefix)"
                    _judge_zip(container, str(path), handle, 0, budget)
                else:
                    _judge(container, str(path), handle, head, 0, budget)
            except _Refused as refused:
                container.refusal, container.refusal_kind, container.refused_at = str(refused), refused.kind, refused.where
    except OSError as exc:
        raise unreadable(path, exc) from None
    return container


def has_zip_end(path: Path) -> bool:
    """Whether the file at `path` ends with a zip archive's end record (a comment up to 64 KiB after
    it): `zipfile` then opens it whatever bytes come first."""
    with path.open("rb") as handle:
        size = handle.seek(0, io.SEEK_END)
        handle.seek(max(size - _ZIP_END_SEARCH, 0))
        return _EMPTY_ZIP in handle.read()


def appended_zip(path: Path) -> Container | None:
    """The pickles of a zip archive that follows other bytes (a pickle) in the file at `path`, judged;
    None when no zip archive ends the file."""
    try:
        if not has_zip_end(path):
            return None
    except OSError as exc:
        raise unreadable(path, exc) from None
    container = Container(path, "a pickle followed by a zip archive")
    with path.open("rb") as handle:
        try:
            _judge_zip(container, str(path), handle, 0, _Budget())
        except _Refused as refused:
            container.refusal, container.refusal_kind, container.refused_at = str(refused), refused.kind, refused.where
    return container


def inspect_container(path: str | Path) -> Inspection:
    """Summarise a container for `ckptspec inspect`: the globals its pickles name, with each member."""
    from .._storage import location

    container = open_container(location(path))
    if container.refusal is not None:
        raise _refusal_error(container)
    return Inspection(
        path=str(container.path),
        format="archive",
        files=[FileSummary(str(container.path), container.path.stat().st_size)],
        tensors=[],
        globals=_merged(container.globals),
        metadata={"container": container.description, "pickles": [member.name for member in container.members]},
    )


def _merged(globals_named: list[GlobalRef]) -> list[GlobalRef]:
    counts: dict[tuple[str, str], GlobalRef] = {}
    for used in globals_named:
        known = counts.get((used.module, used.name))
        counts[used.module, used.name] = used if known is None else replace(known, count=known.count + used.count)
    return list(counts.values())


def _refusal_error(container: Container) -> CkptspecError:
    from .._exceptions import UnsupportedFormatError

    return UnsupportedFormatError(str(container.refusal))


@dataclass
class _Budget:
    inflated: int = 0

    def charge(self, where: str, size: int) -> None:
        self.inflated += size
        if self.inflated > INFLATED_LIMIT:
            raise _Refused(where, f"inflates to more than {INFLATED_LIMIT} bytes in all; judged unsafe", "bounds")


def _judge(container: Container, where: str, stream: io.BufferedIOBase, head: bytes, depth: int, budget: _Budget) -> None:
    """Judge the content `stream` holds (whose first bytes are `head`), named `where`."""
    if depth > NESTING_LIMIT:
        raise _Refused(where, f"containers nest more than {NESTING_LIMIT} deep; judged unsafe", "bounds")
    for magic, name in _UNREADABLE_STREAMS:
        if head.startswith(magic):
            raise _Refused(where, f"cannot be inspected: {name} (no reader in ckptspec's core install); judged unsafe", "uninspectable")
    if head.startswith((_ZIP_MAGIC, _EMPTY_ZIP)):
        _judge_zip(container, where, stream, depth, budget)
    elif _is_tar(head):
        _judge_tar(container, where, stream, depth, budget)
    elif head.startswith(NPY_MAGIC):
        _judge_npy(container, where, stream, budget)
    elif (decompress := _compression(head)) is not None:
        data = _bounded(where, decompress(stream), budget)
        _judge(container, where + "!(decompressed)", io.BytesIO(data), data[:_TAR_MAGIC_END], depth + 1, budget)
    elif _opens_as_pickle(head) or _named_as_pickle(where):
        data = _bounded(where, _chunks(stream), budget)
        container.members.append(_judge_pickle(where, data))
    elif (walked := _walked_as_pickle(stream, budget, where)) is not None:
        container.members.append(_judge_pickle(where, walked))


def _judge_zip(container: Container, where: str, stream: io.BufferedIOBase, depth: int, budget: _Budget) -> None:
    try:
        archive = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise _Refused(where, f"a damaged zip archive ({exc}); cannot be inspected, judged unsafe", "uninspectable") from None
    with archive:
        members = archive.infolist()
        if len(members) > MEMBER_COUNT_LIMIT:
            raise _Refused(where, f"lists {len(members)} members, more than the {MEMBER_COUNT_LIMIT} ckptspec opens; judged unsafe", "bounds")
        for member in members:
            if member.is_dir():
                continue
            name = f"{where}!{member.filename}"
            if member.flag_bits & 0x1:
                raise _Refused(name, "cannot be inspected: an encrypted member; judged unsafe", "uninspectable")
            if member.file_size > _RATIO_FLOOR and member.file_size > RATIO_LIMIT * max(member.compress_size, 1):
                raise _Refused(name, f"claims {member.file_size} bytes from {member.compress_size} stored, more than deflate can inflate; judged unsafe", "bounds")
            try:
                with archive.open(member) as opened:
                    head = opened.read(_TAR_MAGIC_END)
                    _judge(container, name, _Prefixed(head, opened), head, depth + 1, budget)
            except NotImplementedError as exc:
                raise _Refused(name, f"cannot be inspected: {exc}; judged unsafe", "uninspectable") from None
            except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as exc:
                raise _Refused(name, f"a damaged member ({exc}); cannot be inspected, judged unsafe", "uninspectable") from None


def _is_tar(head: bytes) -> bool:
    return head[_TAR_MAGIC_AT:_TAR_MAGIC_END] == b"ustar"


def _judge_tar(container: Container, where: str, stream: io.BufferedIOBase, depth: int, budget: _Budget) -> None:
    try:
        archive = tarfile.open(fileobj=stream, mode="r:")  # type: ignore[call-overload]
        count = 0
        for member in archive:
            count += 1
            if count > MEMBER_COUNT_LIMIT:
                raise _Refused(where, f"holds more than {MEMBER_COUNT_LIMIT} members, more than ckptspec opens; judged unsafe", "bounds")
            if not member.isfile():
                continue
            name = f"{where}!{member.name}"
            opened = archive.extractfile(member)
            if opened is None:
                continue
            head = opened.read(_TAR_MAGIC_END)
            if member.name in _LEGACY_TAR_STREAMS:
                from ._legacy_tar import legacy_tar_stream_globals

                data = _bounded(name, _chunks(_Prefixed(head, opened)), budget)  # type: ignore[arg-type]
                container.members.append(JudgedMember(name, _merged(legacy_tar_stream_globals(data))))
            else:
                _judge(container, name, _Prefixed(head, opened), head, depth + 1, budget)  # type: ignore[arg-type]
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise _Refused(where, f"a damaged tar archive ({exc}); cannot be inspected, judged unsafe", "uninspectable") from None


def _judge_npy(container: Container, where: str, stream: io.BufferedIOBase, budget: _Budget) -> None:
    start = _read_up_to(stream, 4096)
    try:
        length_field = start[8:12] if start[6:7] != b"\x01" else start[8:10]
        wanted = 12 + min(int.from_bytes(length_field, "little"), NPY_HEADER_LIMIT + 1)
        head = start + (_read_up_to(stream, wanted - len(start)) if wanted > len(start) else b"")
        header = read_npy_header(head)
    except NpyHeaderError as exc:
        raise _Refused(where, f"a .npy array numpy.load would refuse or that ckptspec cannot read: {exc}; judged unsafe", "uninspectable") from None
    if not header.may_hold_objects:
        return
    rest = _bounded(where, _chunks(stream), budget, already=len(head))
    container.members.append(_judge_pickle(where, head[header.data_offset :] + rest))


def _judge_pickle(where: str, data: bytes) -> JudgedMember:
    from ._pickle_safety import PickleReadStopped
    from .torchzip import unpickle_untrusted

    try:
        _tree, globals_named = unpickle_untrusted(data, where)
    except PickleReadStopped as exc:
        return JudgedMember(where, exc.globals, str(exc))
    except CkptspecError as exc:
        return JudgedMember(where, [], str(exc))
    return JudgedMember(where, globals_named)


def _opens_as_pickle(head: bytes) -> bool:
    """A PROTO opcode: protocols 2 and later announce themselves."""
    return head[:1] == pickle.PROTO and len(head) > 1 and 2 <= head[1] <= pickle.HIGHEST_PROTOCOL


def _named_as_pickle(where: str) -> bool:
    """A member a loader takes for a pickle by its name, whatever its first bytes."""
    last = where.rsplit("!", 1)[-1].lower()
    return last.endswith(_PICKLE_SUFFIXES) or last == "pickle"


_NAMING_OPCODES = frozenset({"GLOBAL", "INST", "STACK_GLOBAL"})
_CALLING_OPCODES = frozenset({"REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD"})
_OPCODES_TO_TELL = 64
"""Opcodes that parse in a row before content with no signature counts as a pickle: text and
binary data stop within a few bytes (most bytes are no opcode, or an opcode whose argument they
are not)."""


def _walked_as_pickle(stream: io.BufferedIOBase, budget: _Budget, where: str) -> bytes | None:
    """The bytes of a protocol 0 or 1 pickle (no signature, any name) that `stream` holds, or None
    when it holds none. Its first opcodes are parsed, never run: content is a pickle when they reach
    STOP, when `_OPCODES_TO_TELL` of them parse, or when they name a global and call it before they
    stop (`pickle.load` has run the call by then)."""
    recorded = _Recorded(stream, budget, where)
    named = called = False
    try:
        for count, (opcode, _argument, _position) in enumerate(pickletools.genops(recorded), 1):
            named = named or opcode.name in _NAMING_OPCODES
            called = called or (named and opcode.name in _CALLING_OPCODES)
            if count == _OPCODES_TO_TELL:
                break
    except (ValueError, EOFError, _TooLong):
        if not (named and called):
            return None
    return recorded.pulled + _bounded(where, _chunks(stream), budget, already=len(recorded.pulled))


class _TooLong(Exception):
    pass


class _Recorded:
    """A stream read by the opcode parser, a chunk at a time, every byte pulled from it kept to be
    judged after; never more than `MEMBER_BYTES_LIMIT` of them."""

    def __init__(self, stream: io.BufferedIOBase, budget: _Budget, where: str) -> None:
        self._stream, self._budget, self._where = stream, budget, where
        self._pulled = bytearray()
        self._at = 0
        """How much of `_pulled` the parser has taken."""

    @property
    def pulled(self) -> bytes:
        return bytes(self._pulled)

    def read(self, size: int = -1) -> bytes:
        wanted = MEMBER_BYTES_LIMIT + 1 if size < 0 else size
        while len(self._pulled) - self._at < wanted and self._pull():
            pass
        return self._take(self._at + wanted)

    def readline(self) -> bytes:
        while (end := self._pulled.find(b"\n", self._at)) < 0 and self._pull():
            pass
        return self._take(len(self._pulled) if end < 0 else end + 1)

    def _pull(self) -> bool:
        if len(self._pulled) > MEMBER_BYTES_LIMIT:
            raise _TooLong
        chunk = self._stream.read(1 << 16)
        self._budget.charge(self._where, len(chunk))
        self._pulled += chunk
        return bool(chunk)

    def _take(self, end: int) -> bytes:
        taken = bytes(self._pulled[self._at : end])
        self._at += len(taken)
        return taken


def _compression(head: bytes) -> Callable[[io.BufferedIOBase], Iterator[bytes]] | None:
    if head.startswith(b"\x1f\x8b"):
        return lambda stream: _decompressed(stream, zlib.decompressobj(16 + zlib.MAX_WBITS))
    if head.startswith(b"BZh"):
        return lambda stream: _decompressed(stream, bz2.BZ2Decompressor())
    if head.startswith(b"\xfd7zXZ\x00"):
        return lambda stream: _decompressed(stream, lzma.LZMADecompressor())
    if len(head) >= 2 and head[0] == 0x78 and int.from_bytes(head[:2], "big") % 31 == 0:
        return lambda stream: _decompressed(stream, zlib.decompressobj())
    return None


def _decompressed(stream: io.BufferedIOBase, decompressor: Any) -> Iterator[bytes]:
    """Inflate `stream` a chunk at a time, never past `MEMBER_BYTES_LIMIT` + 1 bytes in all: a call
    that returns less than it was allowed has consumed all its input."""
    produced = 0
    for chunk in _chunks(stream):
        try:
            out = decompressor.decompress(chunk, MEMBER_BYTES_LIMIT + 1 - produced)
        except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as exc:
            raise ValueError(f"the compressed stream is damaged ({exc})") from None
        produced += len(out)
        yield out
        if produced > MEMBER_BYTES_LIMIT or decompressor.eof:
            return
    if not decompressor.eof:
        raise ValueError("the compressed stream is cut short")


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    while chunk := stream.read(1 << 20):
        yield chunk


def _bounded(where: str, chunks: Iterator[bytes], budget: _Budget, already: int = 0) -> bytes:
    parts, size = [], already
    try:
        for chunk in chunks:
            size += len(chunk)
            if size > MEMBER_BYTES_LIMIT:
                raise _Refused(where, f"holds more than {MEMBER_BYTES_LIMIT} bytes to judge, more than ckptspec reads of one member; judged unsafe", "bounds")
            budget.charge(where, len(chunk))
            parts.append(chunk)
    except ValueError as exc:
        raise _Refused(where, f"{exc}; cannot be inspected, judged unsafe", "uninspectable") from None
    return b"".join(parts)


def _read_up_to(stream: io.BufferedIOBase, size: int) -> bytes:
    parts, left = [], size
    while left > 0 and (chunk := stream.read(left)):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


class _Prefixed(io.RawIOBase):
    """A stream whose first bytes were already read to tell its kind: they are read again first.
    Seeking (which `zipfile` needs for a zip inside a zip) reads the member whole, bounded."""

    def __init__(self, head: bytes, rest: io.BufferedIOBase) -> None:
        self._head, self._rest = head, rest
        self._whole: io.BytesIO | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _materialised(self) -> io.BytesIO:
        if self._whole is None:
            data = self._head + _read_up_to(self._rest, MEMBER_BYTES_LIMIT + 1 - len(self._head))
            if len(data) > MEMBER_BYTES_LIMIT:
                raise ValueError(f"a nested archive larger than {MEMBER_BYTES_LIMIT} bytes")
            self._whole, self._head = io.BytesIO(data), b""
        return self._whole

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._materialised().seek(offset, whence)

    def tell(self) -> int:
        return self._materialised().tell()

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if self._whole is not None:
            return self._whole.read(size)
        if self._head:
            taken = self._head if size < 0 else self._head[:size]
            self._head = self._head[len(taken) :]
            return taken if size < 0 or len(taken) == size else taken + self._rest.read(size - len(taken))
        return self._rest.read(size)
