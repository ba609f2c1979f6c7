"""Atomic file replacement: readers see the old file or the complete new one, never a part.

The new content goes to a temporary file in the target's directory (so the final rename never
crosses file systems), created like any new file (mode 0o666 less the umask, or the mode of the
file it replaces), and is renamed over the target only once complete. On any failure the temporary
file is removed and the old file is untouched.

The temporary file is created once and handed to the writer open: closing a file that was
truncated on open makes ext4 flush it to disk (its `auto_da_alloc` heuristic), which a create,
close, reopen sequence would pay on every save. A plain rename over an existing file triggers the
same flush, so on Linux an existing regular file is swapped with the new one in one step
(`renameat2(RENAME_EXCHANGE)`) and then unlinked under the temporary name; where the system or the
file system cannot swap, the rename is used. Before the new content is written over a file that
has reached the disk, the kernel is told it may drop that file's cached pages (`_page_cache`; its
bytes stay on disk): holding both files in the page cache made a large replacement several times
slower than an in-place rewrite.

A process killed between the swap and the unlink leaves the previous file, complete, under the
temporary name `.<name>.<random>.tmp` (as a kill during the write leaves the partial new one). Such
leftovers are not silent: `validate` reports them (CKS213), and the next write to the same path
removes every one no live writer holds (each writer locks its temporary file while writing it; a
write racing another to the same path can still lose its file in the instant between closing and
swapping it, and then fails with `WriteError`, the previous file kept).

`durable=True` also fsyncs the file and its directory, so the new file survives a power loss. The
adapters pass `durable=False` for checkpoints and their manifests: the framework does not fsync the
checkpoint either, and on ext4 an fsync right after a checkpoint save forces the whole checkpoint
out to disk with it. Without it a power loss (not a crash of the process) can leave the new file
incomplete, as it can for a framework's own in-place write.

`write_output` is for reports and other outputs a user names: a FIFO, a device or `/dev/null` is
written to as it is, never replaced by a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ._exceptions import WriteError
from ._page_cache import drop_cached_pages

__all__ = [
    "Staged",
    "atomic_file",
    "atomic_write_bytes",
    "remove_leftovers",
    "staged_directory",
    "staged_file",
    "staged_tree",
    "temporary_owner",
    "write_output",
]

_TOKEN_DIGITS = 12
_HEX_DIGITS = frozenset("0123456789abcdef")
_UNSUPPORTED_SWAP = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOENT}
"""Errors of `renameat2(RENAME_EXCHANGE)` after which a plain rename is the right fallback."""


def _token() -> str:
    """`secrets.token_hex` without importing `secrets` (and `hmac`, `hashlib`, `random` with it)."""
    return os.urandom(_TOKEN_DIGITS // 2).hex()


class Staged:
    """A new file (or a file in a new directory) written beside its target under a temporary name
    and not yet in its place: `swap` puts it there in one step; until then the target is untouched."""

    def __init__(self, target: Path, temporary: Path, handle: BinaryIO | None, *, durable: bool, tree: bool = False) -> None:
        self.target = target
        self.temporary = temporary
        """Where the new file is written: `.<name>.<token>.tmp`, or `<name>` inside a directory of that
        name; for a new directory (`tree`), the directory `.<name>.<token>.tmp` itself."""
        self.handle = handle
        """The new file open for writing; None in a staging directory, where a writer opens the file itself."""
        self.durable = durable
        self.tree = tree
        """Whether the new checkpoint is a directory (`staged_tree`), which takes the place of a previous directory or file."""
        self.swapped = False
        """Whether the new file is in the target's place."""
        self.previous: Path | None = None
        """Where the file it replaced lies once swapped (the temporary name), until it is removed."""

    def finish(self) -> None:
        """Every byte written is in the file (and on the disk when durable)."""
        if self.handle is not None:
            self.handle.flush()
            if self.durable:
                os.fsync(self.handle.fileno())
        elif self.durable:
            if self.tree:
                for directory, _, files in os.walk(self.temporary):
                    for name in files:
                        _fsync(Path(directory, name))
            _fsync(self.temporary)

    def swap(self) -> None:
        """Put the new file in the target's place; the previous file, if any, takes the temporary name."""
        if self.tree:
            self._swap_tree()
        elif _is_regular_file(self.target) and _swap(self.temporary, self.target):
            if not _is_regular_file(self.temporary):
                # A directory or link took the target's place after the check: it gets its name back.
                _swap(self.temporary, self.target)
                raise OSError(errno.EEXIST, f"{self.target} was replaced by something other than a file while it was written")
            self.previous = self.temporary
        else:
            os.replace(self.temporary, self.target)
        self.swapped = True
        if self.durable:
            with contextlib.suppress(OSError):  # platforms without directory handles
                _fsync(self.target.parent)

    def _swap_tree(self) -> None:
        """A new directory takes the place of what is at the target (a directory, a file, a link):
        exchanged in one step; where the system cannot, the previous one is renamed aside first,
        and for that instant neither is at the target's name."""
        if not os.path.lexists(self.target):
            os.rename(self.temporary, self.target)
        elif _swap(self.temporary, self.target):
            self.previous = self.temporary
        else:
            aside = self.target.parent / f".{self.target.name}.{_token()}.tmp"
            os.rename(self.target, aside)
            os.rename(self.temporary, self.target)
            os.rename(aside, self.temporary)
            self.previous = self.temporary

    def swap_back(self) -> bool:
        """Give the previous file its place again (a step after the swap failed); False when there
        is no previous file to give back, the swap having been a plain rename."""
        if self.previous is None or not _swap(self.temporary, self.target):
            return False
        self.swapped, self.previous = False, None
        return True


@contextlib.contextmanager
def staged_file(path: str | Path, *, durable: bool = True) -> Iterator[Staged]:
    """A new temporary file beside `path`, open for writing, that the block puts in place with
    `Staged.swap`. On the way out the temporary name is removed: the new file, when the block did
    not swap it in (the target is then untouched), else the previous one. An `OSError` in the block
    before the swap is a `WriteError` saying the previous file was kept."""
    path = Path(path)
    directory = path.parent
    remove_leftovers(path)
    drop_cached_pages(path)
    temporary = directory / f".{path.name}.{_token()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_for(path))
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a file in {directory}: {exc.strerror}") from None
    staged: Staged | None = None
    try:
        with open(fd, "wb") as handle:
            _hold(fd)
            staged = Staged(path, temporary, handle, durable=durable)
            yield staged
    except OSError as exc:
        if staged is None or not staged.swapped:
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None
        raise
    finally:
        if staged is None or not staged.swapped or staged.previous is not None:
            with contextlib.suppress(OSError):  # if this fails, the next write removes it
                os.unlink(temporary)


@contextlib.contextmanager
def staged_directory(path: str | Path, *, durable: bool = True) -> Iterator[Staged]:
    """`staged_file` for a writer that opens the file itself and insists on its name (Keras checks
    the suffix): the new file is `<name>` inside a new directory `.<name>.<token>.tmp` beside the
    target, and that directory is removed on the way out."""
    path = Path(path)
    remove_leftovers(path)
    drop_cached_pages(path)
    directory = path.parent / f".{path.name}.{_token()}.tmp"
    try:
        os.mkdir(directory, 0o777)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a directory in {path.parent}: {exc.strerror}") from None
    staged = Staged(path, directory / path.name, None, durable=durable)
    try:
        _hold(fd)
        yield staged
    except OSError as exc:
        if not staged.swapped:
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None
        raise
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):  # if this fails, the next write removes it
            _remove_tree(directory)


@contextlib.contextmanager
def staged_tree(path: str | Path, *, tree_files: Callable[[str], bool], durable: bool = True) -> Iterator[Staged]:
    """A new directory `.<name>.<token>.tmp` beside `path`, for writers that write a checkpoint as
    a directory of files (a sharded save, every rank into it), put in place with `Staged.swap`.
    On the way out the temporary name is removed with what it holds: the new directory, when the
    block did not swap it in, else the previous checkpoint. `tree_files` names the files such a
    directory holds: a leftover one holding only those is removed."""
    path = Path(path)
    remove_leftovers(path, tree_files=tree_files)
    directory = path.parent / f".{path.name}.{_token()}.tmp"
    try:
        os.mkdir(directory, 0o777)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a directory in {path.parent}: {exc.strerror}") from None
    staged = Staged(path, directory, None, durable=durable, tree=True)
    try:
        _hold(fd)
        yield staged
    except OSError as exc:
        if not staged.swapped:
            raise WriteError(f"{path}: write failed, previous checkpoint kept: {exc.strerror or exc}") from None
        raise
    finally:
        os.close(fd)
        if not staged.swapped or staged.previous is not None:
            with contextlib.suppress(OSError):  # if this fails, the next write removes it
                if directory.is_dir() and not directory.is_symlink():
                    _remove_tree(directory)
                else:  # the previous checkpoint was a file or a link
                    directory.unlink()


@contextlib.contextmanager
def atomic_file(path: str | Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a new temporary file open for writing; on success it replaces `path`."""
    with staged_file(path, durable=durable) as staged:
        assert staged.handle is not None
        yield staged.handle
        try:
            staged.finish()
            staged.swap()
        except OSError as exc:
            raise WriteError(f"{path}: write failed, previous file kept: {exc.strerror or exc}") from None


def atomic_write_bytes(path: str | Path, payload: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `payload` atomically (see the module docstring)."""
    with atomic_file(path, durable=durable) as handle:
        handle.write(payload)


def write_output(path: str | Path, payload: bytes) -> None:
    """Write `payload` to a path the user named: into a special file as it is, else atomically."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if not mode or stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        atomic_write_bytes(path, payload)
        return
    try:
        with open(path, "wb") as handle:
            handle.write(payload)
    except OSError as exc:
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _swap(first: Path, second: Path) -> bool:
    """Exchange two names in one step; False where this system or file system cannot."""
    exchange = _exchange()
    if exchange is None:
        return False
    error = exchange(os.fsencode(first), os.fsencode(second))
    if not error:
        return True
    if error in _UNSUPPORTED_SWAP:
        return False
    raise OSError(error, os.strerror(error))


@functools.cache
def _exchange() -> Callable[[bytes, bytes], int] | None:
    """`renameat2(AT_FDCWD, old, AT_FDCWD, new, RENAME_EXCHANGE)` from the C library, returning 0 or
    the errno; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only here: most commands never replace a file

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library older than glibc 2.28, or none to load
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_cwd, rename_exchange = -100, 2  # from <fcntl.h> and <linux/fs.h>

    def exchange(old: bytes, new: bytes) -> int:
        return 0 if renameat2(at_cwd, old, at_cwd, new, rename_exchange) == 0 else ctypes.get_errno()

    return exchange


def _hold(fd: int) -> None:
    """Lock the temporary file while it is written, so no other write removes it as a leftover."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_leftovers(path: Path, *, any_name: bool = False, tree_files: Callable[[str], bool] = lambda _name: False) -> None:
    """Remove the temporary files (and staging directories) interrupted writes to `path` left
    behind, or with `any_name` those of every file in its directory; none a live writer holds.
    A staging directory goes only when it holds nothing but regular files named as the file it
    stages or, for a staged tree, files `tree_files` names as the caller's (a sharded save's)."""
    prefix = f".{path.name}."
    try:
        with os.scandir(path.parent) as entries:  # names only: no pattern to compile, nothing to stat
            leftovers = [
                entry.name
                for entry in entries
                if (temporary_owner(entry.name) is not None if any_name else _is_temporary_name(entry.name, prefix))
            ]
    except OSError:  # the directory cannot be listed: creating the temporary file will say why
        return
    for name in leftovers:
        _remove_if_abandoned(path.parent / name, tree_files)


def temporary_owner(name: str) -> str | None:
    """The name whose write a temporary file or staging directory named `name` belongs to
    (`.<owner>.<token>.tmp`); None for any other name."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    owner, _, token = name[1 : -len(".tmp")].rpartition(".")
    return owner if owner and _is_token(token) else None


def _is_temporary_name(name: str, prefix: str) -> bool:
    """Whether `name` is `<prefix><token>.tmp`, the name `atomic_file` gives its temporary files."""
    if not (name.startswith(prefix) and name.endswith(".tmp")):
        return False
    return _is_token(name[len(prefix) : -len(".tmp")])


def _is_token(token: str) -> bool:
    return len(token) == _TOKEN_DIGITS and all(digit in _HEX_DIGITS for digit in token)


def _remove_if_abandoned(candidate: Path, tree_files: Callable[[str], bool]) -> None:
    try:
        import fcntl
    except ImportError:  # no locks to tell a live writer's file from a leftover: validate reports them
        return
    with _file_or_directory(candidate) as (fd, is_directory):
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if is_directory:
                _remove_staging(candidate, tree_files)
            else:
                candidate.unlink()
        except OSError:  # held by a live writer, or already gone
            pass


def _remove_staging(directory: Path, tree_files: Callable[[str], bool]) -> None:
    """Remove a staging directory an interrupted write left: one that holds nothing but regular
    files a staged save writes (the new file named as its target, or those `tree_files` names), or
    nothing. A directory holding anything else is not ckptspec's."""
    owner = temporary_owner(directory.name)
    with os.scandir(directory) as entries:
        inside = [(entry.name, entry.is_file(follow_symlinks=False)) for entry in entries]
    if not all(is_file and (name == owner or tree_files(name)) for name, is_file in inside):
        return
    for name, _ in inside:
        os.unlink(directory / name)
    os.rmdir(directory)


def _remove_tree(directory: Path) -> None:
    """Remove the staging directory of this write and whatever its writer put in it (links are
    removed, not followed)."""
    import shutil  # only where a staging directory was used

    shutil.rmtree(directory)


@contextlib.contextmanager
def _file_or_directory(path: Path) -> Iterator[tuple[int | None, bool]]:
    """`path` open for reading, and whether it is a directory; None for a FIFO, a device, a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        yield None, False
        return
    try:
        mode = os.fstat(fd).st_mode
        yield (fd, stat.S_ISDIR(mode)) if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else (None, False)
    finally:
        os.close(fd)


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666  # os.open applies the umask


def _fsync(path: Path) -> None:
    """fsync a file, or a directory (its entries), by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
