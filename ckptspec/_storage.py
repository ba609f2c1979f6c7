"""Where checkpoints live: a local path, or a URL that fsspec knows (`s3://`, `gs://`, `az://`, `memory://`).

`location` turns what a user typed into a `pathlib.Path` or a `RemotePath`. A `RemotePath` offers the
part of `pathlib`'s API the readers use (names, parents, joining, `stat`, listing, whole small
files), so the readers walk a bucket prefix the way they walk a directory. Reading byte ranges of
large files is `formats/_source.py`'s work. `file://` URLs become local paths: the same bytes, read
through the mmap fast path. fsspec is imported only when a URL is given, so local use costs nothing.

Every failure of the store (a missing object, a permission, a protocol whose package is missing,
a network error) becomes a `ReaderError` naming the URL.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import io
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any, TypeVar

from ._exceptions import CkptspecError, ReaderError, WriteError

__all__ = ["READ_BLOCK", "STRUCTURE_BLOCK", "Location", "RemotePath", "StoreError", "exists_or_link", "is_directory", "is_file", "is_url", "location", "open_binary", "put_whole", "remote_errors", "resolutions_kept", "resolved", "with_suffix_added"]

_URL = re.compile(r"^(?P<protocol>[A-Za-z][A-Za-z0-9+.\-]+)(?:::[A-Za-z][A-Za-z0-9+.\-]*)*://")
"""`protocol://...`, with fsspec's `a::b://` chains; two letters at least, so `C:\\...` stays a path."""
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
"""The ckptspec extra that installs each protocol's fsspec implementation."""
_LOCAL_PROTOCOLS = ("file", "local")
_ALIASING_SEGMENTS = frozenset({"", ".", ".."})
_LOCAL_PATH = type(Path())

T = TypeVar("T")


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` is a URL (`s3://bucket/key`) rather than a local path."""
    return isinstance(text, str) and _URL.match(text) is not None


def location(path: str | os.PathLike[str] | RemotePath, **storage_options: Any) -> Location:
    """`path` as the readers take it: a `RemotePath` for a URL, a `Path` for anything else.
    `storage_options` go to the URL's fsspec filesystem (an endpoint, credentials); without them
    fsspec's configuration and the store's usual environment variables apply."""
    if isinstance(path, RemotePath) or type(path) is _LOCAL_PATH:
        return path  # immutable: already what the readers take
    if not is_url(str(path)) or isinstance(path, Path):
        return Path(path)
    url = str(path)
    protocol = _URL.match(url)["protocol"].lower()  # type: ignore[index]
    fs, inner = _filesystem(url, protocol, storage_options)
    if protocol in _LOCAL_PROTOCOLS:
        return Path(inner)
    return RemotePath(fs, inner)


def _filesystem(url: str, protocol: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    extra = _EXTRAS.get(protocol, "remote")
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise ReaderError(f"{url}: reading URLs needs fsspec: pip install 'ckptspec[{extra}]'") from None
    try:
        return url_to_fs(url, **storage_options)
    except ImportError as exc:
        raise ReaderError(f"{url}: reading {protocol}:// needs a package that is not installed: pip install 'ckptspec[{extra}]' ({exc})") from None
    except ValueError as exc:
        raise ReaderError(f"{url}: not a storage URL fsspec knows: {exc}") from None


class RemotePath:
    """A file or folder in an fsspec filesystem, named by its URL.

    Folders of object stores are prefixes: a prefix with objects under it is a folder, one without
    is nothing. Listings remember the size and type of each child, so walking a prefix costs one
    request per folder, not one per file.
    """

    __slots__ = ("fs", "path", "_info", "_listed")

    def __init__(self, fs: Any, path: str, info: dict[str, Any] | None = None) -> None:
        self.fs = fs
        self.path = path.rstrip("/") or path
        """The path inside the filesystem, without the protocol (`bucket/key` for S3)."""
        self._info = info
        self._listed: dict[str, dict[str, Any]] = {}
        """The description of each child the last `iterdir` listed, by path: reused by `joinpath`."""

    # --- names ---------------------------------------------------------------------------------

    def __str__(self) -> str:
        return str(self.fs.unstrip_protocol(self.path))

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and (self.fs, self.path) == (other.fs, other.path)

    def __hash__(self) -> int:
        return hash(self.path)

    def __lt__(self, other: RemotePath) -> bool:
        return self.path < other.path

    def __truediv__(self, name: str) -> RemotePath:
        return self.joinpath(name)

    def joinpath(self, *names: str) -> RemotePath:
        joined = posixpath.normpath("/".join([self.path.rstrip("/"), *names]))
        return RemotePath(self.fs, joined, self._listed.get(joined))

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rpartition("/")[2]

    @property
    def suffix(self) -> str:
        name = self.name
        dot = name.rfind(".")
        return name[dot:] if 0 < dot < len(name) - 1 else ""

    @property
    def parent(self) -> RemotePath:
        head = self.path.rstrip("/").rpartition("/")[0]
        return RemotePath(self.fs, head or self.path)

    def with_name(self, name: str) -> RemotePath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> RemotePath:
        name = self.name
        return self.with_name(name[: len(name) - len(self.suffix)] + suffix)

    def is_absolute(self) -> bool:
        return True

    def resolve(self) -> RemotePath:
        return self  # no links to follow

    def is_relative_to(self, other: RemotePath) -> bool:
        return isinstance(other, RemotePath) and (self.path + "/").startswith(other.path.rstrip("/") + "/")

    def relative_to(self, other: RemotePath) -> Path:
        if not self.is_relative_to(other):
            raise ValueError(f"{self} is not under {other}")
        return Path(self.path[len(other.path.rstrip("/")) + 1 :])

    # --- what is there -------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """fsspec's description of the object (`type`, `size`); `FileNotFoundError` when absent."""
        if self._info is None:
            self._info = remote_errors(self, lambda: self.fs.info(self.path), missing_ok=True)
        return self._info

    def stat(self) -> os.stat_result:
        """A `stat` result with the type (regular file or folder), size and, where known, modification time."""
        info = self.info()
        folder = info.get("type") == "directory"
        mode = (stat.S_IFDIR | 0o555) if folder else (stat.S_IFREG | 0o444)
        size = 0 if folder else int(info.get("size") or 0)
        mtime = _timestamp(info)
        return os.stat_result((mode, 0, 0, 1, 0, 0, size, mtime, mtime, mtime))

    def exists(self) -> bool:
        try:
            self.info()
        except FileNotFoundError:
            return False
        return True

    def is_file(self) -> bool:
        return self.exists() and self.info().get("type") != "directory"

    def is_dir(self) -> bool:
        return self.exists() and self.info().get("type") == "directory"

    def is_symlink(self) -> bool:
        return False  # object stores have no links

    def iterdir(self) -> Iterator[RemotePath]:
        listed = remote_errors(self, lambda: self.fs.ls(self.path, detail=True))
        children = {str(entry["name"]).rstrip("/"): entry for entry in listed}
        children.pop(self.path, None)
        self._listed = children
        for child, entry in children.items():
            yield RemotePath(self.fs, child, entry)

    def glob(self, pattern: str) -> Iterator[RemotePath]:
        """The children whose names match `pattern` (one level, `fnmatch` rules, as `Path.glob`)."""
        try:
            children = list(self.iterdir())
        except ReaderError:
            return
        yield from (child for child in children if fnmatch.fnmatchcase(child.name, pattern))

    def walk_files(self) -> list[RemotePath]:
        """Every object under this prefix, at any depth, with its size known; not the empty objects
        named `folder/` that consoles create to show a folder."""
        found = remote_errors(self, lambda: self.fs.find(self.path, detail=True))
        return sorted(
            RemotePath(self.fs, name, info)
            for name, info in found.items()
            if info.get("type") != "directory" and not (name.endswith("/") and not info.get("size"))
        )

    def key_problem(self, under: RemotePath) -> str | None:
        """Why this object's key, below the prefix `under`, is not a plain path, else None. Object
        stores keep `a/../b` and `a//b` as they are; joined to a prefix they would name another
        object (possibly outside `under`), so such an object is never read under another name."""
        segments = self.path[len(under.path.rstrip("/")) + 1 :].split("/")
        if any(segment in _ALIASING_SEGMENTS for segment in segments):
            return "its key holds an empty, '.' or '..' segment, so it names another object once normalised; it was not read"
        return None

    # --- whole small files ---------------------------------------------------------------------

    def read_bytes(self) -> bytes:
        return bytes(remote_errors(self, lambda: self.fs.cat_file(self.path)))

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open(self, mode: str = "rb") -> IO[bytes]:
        if mode != "rb":
            raise ValueError("remote checkpoints are opened for reading only")
        return open_binary(self)


Location = Path | RemotePath
"""Where a checkpoint or document lives."""


_resolutions: ContextVar[dict[Location, Location] | None] = ContextVar("resolutions", default=None)


@contextlib.contextmanager
def resolutions_kept() -> Iterator[None]:
    """Inside it, `resolved` resolves each path once: judging one checkpoint matches the same few
    files by their resolved paths a dozen times, and each resolution is a system call per folder."""
    token = _resolutions.set({})
    try:
        yield
    finally:
        _resolutions.reset(token)


def resolved(path: Location) -> Location:
    """`path.resolve()`; inside `resolutions_kept`, the first answer for `path` is kept."""
    kept = _resolutions.get()
    if kept is None:
        return path.resolve()
    if path not in kept:
        kept[path] = path.resolve()
    return kept[path]


def with_suffix_added(path: Location, suffix: str) -> Location:
    """The file named as `path` with `suffix` appended (`x.ckpt` → `x.ckpt.ckptspec.yaml`), in the same store."""
    if isinstance(path, RemotePath):
        return path.with_name(path.name + suffix)
    return Path(f"{path}{suffix}")


def exists_or_link(path: Location) -> bool:
    """`os.path.lexists` for both kinds of location: a broken link still counts as something there."""
    return path.exists() if isinstance(path, RemotePath) else os.path.lexists(path)


def is_directory(path: Location) -> bool:
    """Whether `path` is a directory; False also where it cannot be looked at (a directory above it
    that may not be searched, a store that refuses), so the reader that opens it names the error."""
    try:
        return path.is_dir()
    except OSError:
        return False


def is_file(path: Location) -> bool:
    """Whether `path` is a file; False also where it cannot be looked at, as for `is_directory`."""
    try:
        return path.is_file()
    except OSError:
        return False


READ_BLOCK = 16 << 20
"""What one request of a front-to-back pass over a remote file fetches: large enough that the
per-request cost of an object store does not dominate, small enough to keep memory flat."""
STRUCTURE_BLOCK = 64 << 10
"""What one request for a file's structure fetches at least (a zip record's local header and its
neighbours, a pickle's next opcodes), rather than one request per field."""


def open_binary(path: Location, *, block: int = READ_BLOCK) -> IO[bytes]:
    """A file object for reading `path`. A remote file is fetched by ranged requests of `block`
    bytes (more when one read asks for more), one block held at a time: a pass over the file
    fetches each byte once."""
    if isinstance(path, Path):
        return open(path, "rb", buffering=0)
    return _RangedReader(path, block)  # type: ignore[return-value]


class _RangedReader(io.RawIOBase):
    """A remote file read by ranged requests (`cat_file`) from the position `seek` sets, through one
    block of at most `block` bytes (or one read's size)."""

    def __init__(self, path: RemotePath, block: int) -> None:
        super().__init__()
        self._path = path
        self._size = path.stat().st_size
        self._block_size = block
        self._position = 0
        self._block_start, self._block = 0, memoryview(b"")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        """`size` bytes, fewer only at the end of the file, as a buffered file reads: parsers such
        as `pickletools` take a short read for the end. At most the bytes the object has are
        allocated, whatever length a hostile file declares (a pickle's BINBYTES8)."""
        if size is None or size < 0:
            return self.readall()
        buffer = bytearray(min(size, max(0, self._size - self._position)))
        view, filled = memoryview(buffer), 0
        while filled < len(buffer) and (count := self.readinto(view[filled:])):
            filled += count
        view.release()
        return bytes(buffer[:filled])

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._position >= self._size or not len(view):
            return 0
        inside = self._position - self._block_start
        if not 0 <= inside < len(self._block):
            self._fetch(max(len(view), self._block_size))
            inside = 0
        count = min(len(view), len(self._block) - inside)
        view[:count] = self._block[inside : inside + count]
        self._position += count
        return count

    def _fetch(self, size: int) -> None:
        start, end = self._position, min(self._position + size, self._size)
        self._block = memoryview(b"")  # the old block is freed before the next one arrives
        data = remote_errors(self._path, lambda: self._path.fs.cat_file(self._path.path, start=start, end=end))
        self._block_start, self._block = start, memoryview(data)


def put_whole(path: RemotePath, payload: bytes) -> None:
    """Store `payload` as the object at `path` in one request: object stores make an object visible
    only once its upload completes, so readers see the old object or the whole new one, never a part."""
    try:
        remote_errors(path, lambda: path.fs.pipe_file(path.path, payload))
    except ReaderError as exc:
        raise WriteError(str(exc).replace(": cannot read:", ": cannot write:")) from None
    path._info = None


class StoreError(ReaderError, OSError):
    """A read the store refused or failed, naming the URL. It is also an `OSError`, so that every
    reader handles it as it handles a local file it cannot read (a finding on that file, the
    check goes on)."""

    def __init__(self, path: RemotePath, reason: str, code: int) -> None:
        OSError.__init__(self, code, reason)  # errno and strerror, as a local read's error has them
        self.globals = []
        self.message = f"{path}: cannot read: {reason}"

    def __str__(self) -> str:
        return self.message


def remote_errors(path: RemotePath, call: Callable[[], T], *, missing_ok: bool = False) -> T:
    """`call()`, its failures turned into `StoreError`s naming `path` (`FileNotFoundError` is let
    through with `missing_ok`, for callers that ask whether something exists)."""
    try:
        return call()
    except CkptspecError:
        raise
    except FileNotFoundError:
        if missing_ok:
            raise
        raise StoreError(path, "no such file or object", errno.ENOENT) from None
    except PermissionError:
        raise StoreError(path, "permission denied by the store", errno.EACCES) from None
    except IsADirectoryError:
        raise StoreError(path, "is a directory (a prefix), not a file", errno.EISDIR) from None
    except Exception as exc:  # noqa: BLE001 - stores raise their client library's own errors
        raise StoreError(path, f"{type(exc).__name__}: {exc}", errno.EIO) from None


def _timestamp(info: dict[str, Any]) -> float:
    value = info.get("LastModified") or info.get("mtime") or info.get("created")
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value) if isinstance(value, (int, float)) else 0.0
