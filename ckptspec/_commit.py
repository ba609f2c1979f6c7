"""A checkpoint and its manifest replaced together: at every instant of a save the files hold a
checkpoint and a manifest that describes it, the previous pair or the new one.

A save of `NAME` (under `saving`) runs as one writer at a time, holding an advisory lock on
`.NAME.ckptspec.lock` beside it (`flock`: the kernel releases it when the process dies, so a
killed writer never blocks the next one). In order:

1. What an interrupted save left is settled: a pending record that describes the bytes at `NAME`
   becomes its manifest, any other record is removed, and temporary files no live writer holds go.
2. The new checkpoint is written under a temporary name (`_atomic.staged_file`; a directory of
   files, `_atomic.staged_tree`) and its manifest is built from the bytes written.
3. The manifest is written, complete, as the pending record `NAME.ckptspec.pending.yaml`.
4. The previous checkpoint's exported program and signature are removed: they describe it.
5. The new checkpoint takes the previous one's place in one step (`renameat2(RENAME_EXCHANGE)`).
6. The record is renamed over `NAME.ckptspec.yaml`.

Before 5 the previous manifest describes the file at `NAME` (the record describes bytes that are
not there yet), between 5 and 6 the record does, after 6 the manifest does. A reader that finds a
record (`manifest_choice`) reads whichever of the two describes the bytes and reports the
interrupted save. A step that fails undoes the ones before it (a failed 6 swaps the previous file
back), so a `WriteError` always keeps the previous pair, except where the file system cannot swap
(then 5 was a plain rename and the record stays the manifest, which the error says).

What survives what: every step is a rename or an unlink that the kernel makes visible in order, so
a process killed at any moment leaves a pair. Against a power cut only `durable` saves keep that
order (the new file and the record are fsynced, and the directory after each rename); the
adapters save without, like the frameworks themselves (see docs/crash-safety.md).

Removing a checkpoint (`Save.discard`) runs the other way: the manifest becomes the record, the
files go, then the record, so no manifest ever lists files that are gone.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ._dataclass import dataclass
from . import _interrupts
from ._atomic import Staged, atomic_write_bytes, remove_leftovers, staged_directory, staged_file, staged_tree, temporary_owner
from ._documents import document_bytes, read_manifest
from ._sidecars import LOCK_SUFFIX, MANIFEST_SUFFIX, PENDING_SUFFIX, manifest_path_for
from ._exceptions import DocumentError, ReaderError, WriteError
from ._scan import Algorithm, file_digests
from ._storage import RemotePath, location, with_suffix_added
from .formats._names import STATE_FILE_NAME, is_sharded_save_file, tf_shard_prefix

if TYPE_CHECKING:
    from ._models import Manifest

__all__ = [
    "ManifestChoice",
    "Save",
    "as_committed",
    "discarded_bundles",
    "leftover_of",
    "lock_path_for",
    "manifest_choice",
    "pending_path_for",
    "saving",
    "serialised",
    "tensorflow_staging_of",
]


def pending_path_for(checkpoint: str | Path) -> Path:
    """Where a save of `checkpoint` keeps its new manifest until the new checkpoint is in place."""
    return with_suffix_added(location(checkpoint), PENDING_SUFFIX)  # type: ignore[return-value]


def leftover_of(name: str) -> str | None:
    """What the file or directory `name` is, when it is one an interrupted save left beside its
    checkpoint (a temporary file, a staging directory, a lock file); None for any other name."""
    if (owner := temporary_owner(name)) is not None:
        return f"the new bytes of an interrupted save of {owner}, never put in its place; the next save of {owner} removes them"
    if name.startswith(".") and name.endswith(LOCK_SUFFIX) and len(name) > len(LOCK_SUFFIX) + 1:
        owner = name[1 : -len(LOCK_SUFFIX)]
        return f"the lock file of a save of {owner} that is running or was killed; the next save of {owner} removes it"
    return None


_TF_STAGED_PART = re.compile(r"part-\d{5}-of-\d{5}\.(?:index|data-\d{5}-of-\d{5})(?:\.tempstate\d+)?")
"""A file TensorFlow writes into `PREFIX_temp/` before it merges the parts into the bundle `PREFIX`."""


def tensorflow_staging_of(directory: Path) -> str | None:
    """What the directory is when TensorFlow left it while writing a bundle (`PREFIX_temp/`, holding
    nothing but the parts it merges into `PREFIX` and then removes); None for any other directory."""
    if not directory.name.endswith("_temp") or len(directory.name) == len("_temp"):
        return None
    try:
        with os.scandir(directory) as entries:
            inside = [(entry.name, entry.is_file(follow_symlinks=False)) for entry in entries]
    except OSError:
        return None
    if any(not is_file or _TF_STAGED_PART.fullmatch(name) is None for name, is_file in inside):
        return None
    prefix = directory.name[: -len("_temp")]
    return f"the parts TensorFlow wrote for the bundle {prefix} before its save was interrupted, never merged into it; not a checkpoint"


def discarded_bundles(directory: Path, names: Collection[str]) -> dict[str, str]:
    """The files, among `names` in `directory`, of the TensorFlow bundles that the state file there
    no longer lists and that have no manifest (a save or a removal of them was interrupted), with
    what each is; a pending record among them is the removal's. Empty without a readable state file."""
    from .formats.tf_state import read_checkpoint_state

    if STATE_FILE_NAME not in names:
        return {}
    try:
        state = read_checkpoint_state(directory)
    except ReaderError:
        return {}
    listed = {*state.all_model_checkpoint_paths, state.model_checkpoint_path}
    bundles: dict[str, list[str]] = {}
    for name in names:
        prefix = name[: -len(".index")] if name.endswith(".index") else tf_shard_prefix(name)
        if prefix:
            bundles.setdefault(prefix, []).append(name)
    found = {}
    for prefix, files in bundles.items():
        if directory / prefix in listed or f"{prefix}{MANIFEST_SUFFIX}" in names:
            continue
        pending = f"{prefix}{PENDING_SUFFIX}"
        for name in [*files, pending] if pending in names else files:
            found[name] = (
                f"a file of the TensorFlow bundle {prefix}, which {STATE_FILE_NAME} no longer lists and which has no "
                "manifest: a save or a removal of it was interrupted; restores never read it, and it is not judged"
            )
    return found


def lock_path_for(checkpoint: str | Path) -> Path:
    """The file whose lock one save of `checkpoint` holds at a time."""
    path = Path(checkpoint)
    return path.parent / f".{path.name}{LOCK_SUFFIX}"


@contextlib.contextmanager
def saving(checkpoint: str | Path, *, durable: bool = False) -> Iterator[Save]:
    """The one save of `checkpoint` in progress (see the module docstring): Ctrl-C is raised once
    the block is done, and the lock released, whatever it did."""
    checkpoint = Path(checkpoint)
    with _interrupts.held(), _locked(checkpoint):
        _settle(checkpoint)
        # A run saves under a new name each time (Lightning's `epoch=0-step=7.ckpt`): what a killed
        # save of any checkpoint here left goes now, not when that name is saved again.
        remove_leftovers(checkpoint, any_name=True, tree_files=is_sharded_save_file)
        _remove_abandoned_locks(checkpoint)
        save = Save(checkpoint, durable)
        try:
            yield save
        except (OSError, WriteError) as exc:
            if save.reported:
                raise
            if save.committed:  # a sidecar written after the pair (the exported program, the signature)
                raise WriteError(f"{checkpoint}: saved with its manifest, but then: {exc}") from None
            raise save._failed("the new checkpoint could not be written", exc) from None


@contextlib.contextmanager
def serialised(checkpoint: str | Path) -> Iterator[None]:
    """The lock of `checkpoint`'s saves held, and Ctrl-C raised once the block is done, for a writer
    that commits its files its own way (TensorFlow's bundles, under the lock of their state file)."""
    with _interrupts.held(), _locked(Path(checkpoint)):
        yield


class Save:
    """One save of a checkpoint, from `saving`."""

    def __init__(self, checkpoint: Path, durable: bool) -> None:
        self.checkpoint = checkpoint
        self.durable = durable
        self._removed: list[str] = []
        """The previous checkpoint's sidecars the commit removed."""
        self.committed = False
        """Whether the new pair is in place."""
        self.reported = False
        """Whether the save's failure was raised with what it kept."""

    def file(self) -> contextlib.AbstractContextManager[Staged]:
        """The new checkpoint, to be written under a temporary name beside it."""
        return staged_file(self.checkpoint, durable=self.durable)

    def directory(self) -> contextlib.AbstractContextManager[Staged]:
        """The new checkpoint, for a writer that opens it by name: `NAME` in a staging directory."""
        return staged_directory(self.checkpoint, durable=self.durable)

    def tree(self) -> contextlib.AbstractContextManager[Staged]:
        """The new checkpoint as a directory, for writers that write one (a sharded save): a new
        directory beside it, which takes the previous checkpoint's place in one step."""
        return staged_tree(self.checkpoint, tree_files=is_sharded_save_file, durable=self.durable)

    def commit(self, staged: Staged, manifest: Manifest) -> None:
        """Steps 3 to 6: the new checkpoint `staged` and its `manifest` take the previous pair's place.
        A Ctrl-C before the record is written stops the save here; after it, the commit goes on."""
        _interrupts.raise_if_interrupted()
        pending, target = pending_path_for(self.checkpoint), manifest_path_for(self.checkpoint)
        payload = document_bytes(manifest, target)
        try:
            staged.finish()
        except OSError as exc:
            raise self._failed("the new checkpoint could not be written", exc) from None
        try:
            atomic_write_bytes(pending, payload, durable=self.durable)
        except WriteError as exc:
            raise self._failed(f"its manifest could not be written to {pending.name}", exc) from None
        try:
            self._removed = _remove_sidecars(self.checkpoint)
            staged.swap()
        except OSError as exc:
            _discard_quietly(pending)
            raise self._failed("the new checkpoint could not take the place of the previous one", exc) from None
        try:
            os.replace(pending, target)
        except OSError as exc:
            if staged.swap_back():
                _discard_quietly(pending)
                raise self._failed(f"its manifest could not replace {target.name}", exc) from None
            self.reported = True
            raise WriteError(
                f"{self.checkpoint}: saved, but its manifest could not replace {target.name} ({_reason(exc)}): the new "
                f"manifest is {pending.name}, which validation and restores read until a save completes it"
            ) from None
        self.committed = True
        if self.durable:
            _fsync_directory(self.checkpoint.parent)

    def discard(self, remove: Callable[[], None]) -> None:
        """Remove the checkpoint with `remove()` (the framework's own removal): its manifest becomes
        the pending record first, and the record goes last, so that no manifest lists removed files."""
        pending, manifest = pending_path_for(self.checkpoint), manifest_path_for(self.checkpoint)
        recorded = os.path.lexists(manifest)
        try:
            if recorded:
                os.replace(manifest, pending)
            _remove_sidecars(self.checkpoint)
        except OSError as exc:
            self.reported = True
            raise WriteError(f"{self.checkpoint}: not removed: {manifest.name} could not be set aside ({_reason(exc)}); nothing was removed") from None
        try:
            remove()
        except BaseException:
            self.reported = True  # the framework's own error says what it could not remove
            if recorded:
                with contextlib.suppress(OSError):
                    os.replace(pending, manifest)
            raise
        _discard_quietly(pending)
        self.committed = True

    def _failed(self, what: str, error: BaseException) -> WriteError:
        self.reported = True
        return WriteError(f"{self.checkpoint}: not saved: {what} ({_reason(error)}); {self._kept()}")

    def _kept(self) -> str:
        """What a failed save left of the previous checkpoint, as it is on disk now."""
        manifest = manifest_path_for(self.checkpoint)
        if not os.path.lexists(self.checkpoint):
            return "there was no previous checkpoint, and nothing of the new one is left"
        kept = "the previous checkpoint and its manifest are kept" if manifest.is_file() else "the previous checkpoint is kept (it had no manifest)"
        if self._removed:
            kept += f"; its {' and '.join(self._removed)} were removed" if len(self._removed) > 1 else f"; its {self._removed[0]} was removed"
        return kept


def as_committed(manifest: Manifest, staged: Staged) -> Manifest:
    """The manifest of a checkpoint built where it was staged (`staged.temporary`), naming the
    checkpoint, and for a directory the files in it, as they are named once it is committed."""
    name, staging = staged.target.name, staged.temporary.name
    if not staged.tree:
        return manifest.model_copy(update={"checkpoint": name})
    files = [entry.model_copy(update={"path": f"{name}/{entry.path.partition('/')[2]}"}) if entry.path.startswith(f"{staging}/") else entry for entry in manifest.files]
    return manifest.model_copy(update={"checkpoint": name, "files": files})


@dataclass(frozen=True)
class ManifestChoice:
    """The manifest a reader takes for a checkpoint, and what an interrupted save left, if anything."""

    path: Path
    """The manifest, or the pending record when it is the one that describes the checkpoint."""
    pending: Path | None = None
    """The pending record an interrupted save left; None when there is none."""
    interrupted: str | None = None
    """What the interrupted save left, in words; None when there is no record."""


def manifest_choice(checkpoint: str | Path) -> ManifestChoice:
    """Which manifest describes `checkpoint`: its manifest, unless an interrupted save left a
    pending record that describes the bytes on disk (sizes and every recorded digest equal; a
    record without digests only when there is no manifest to take instead)."""
    checkpoint = location(checkpoint)
    manifest = manifest_path_for(checkpoint)
    if isinstance(checkpoint, RemotePath):
        return ManifestChoice(manifest)
    pending = pending_path_for(checkpoint)
    if not pending.is_file():
        return ManifestChoice(manifest)
    try:
        record = read_manifest(pending)
    except DocumentError as exc:
        return ManifestChoice(manifest, pending, f"a save of it was interrupted and left {pending.name}, which cannot be read ({exc}); {manifest.name} is read instead")
    has_manifest = manifest.is_file()
    if _describes(record, manifest.parent, digests_needed=has_manifest):
        return ManifestChoice(
            pending,
            pending,
            f"a save of it was interrupted after the new file took its place: {pending.name}, which describes it, "
            f"is its manifest until the next save completes it ({manifest.name} described the previous file)"
            if has_manifest
            else f"a save or a removal of it was interrupted: {pending.name}, which describes it, is its manifest",
        )
    return ManifestChoice(
        manifest,
        pending,
        f"a save of it was interrupted before the new file took its place: {pending.name} describes bytes that are "
        f"not here, {manifest.name} is read",
    )


def _describes(record: Manifest, base: Path, *, digests_needed: bool) -> bool:
    """Whether every file `record` lists is at its place with its size and its recorded digests."""
    checked = False
    for entry in record.files:
        path = base / entry.path
        try:
            if path.stat().st_size != entry.size:
                return False
        except OSError:
            return False
        algorithms: tuple[Algorithm, ...] = ("crc32c",) if entry.crc32c else ("sha256",) if entry.sha256 else ()
        if not algorithms:
            continue
        try:
            read = file_digests(path, algorithms)
        except OSError:
            return False
        if getattr(read, algorithms[0]) != getattr(entry, algorithms[0]):
            return False
        checked = True
    return bool(record.files) and (checked or not digests_needed)


def _settle(checkpoint: Path) -> None:
    """Step 1: the record an interrupted save left becomes the manifest if it describes the file, else goes."""
    choice = manifest_choice(checkpoint)
    if choice.pending is None:
        return
    try:
        if choice.path == choice.pending:
            os.replace(choice.pending, manifest_path_for(checkpoint))
        else:
            os.unlink(choice.pending)
    except OSError as exc:
        raise WriteError(
            f"{checkpoint}: not saved: an interrupted save left {choice.pending.name}, which could not be settled "
            f"({_reason(exc)}); nothing was changed"
        ) from None


@contextlib.contextmanager
def _locked(checkpoint: Path) -> Iterator[None]:
    """Hold the lock of `checkpoint`'s saves; a second writer waits here until the first is done.

    The lock file is removed on release. A waiter may then hold the lock of a file no longer
    there, so a lock counts only once the file at the lock's name is the one locked."""
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform: writers are not serialised
        yield
        return
    lock = lock_path_for(checkpoint)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise WriteError(f"{checkpoint}: not saved: cannot create the lock file {lock.name} in {lock.parent}: {_reason(exc)}; nothing was changed") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            current = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _remove_abandoned_locks(checkpoint: Path) -> None:
    """Remove the lock files that killed saves of other checkpoints in this directory left: those
    no live save holds (a lock is taken before its file is removed, as `_locked` expects)."""
    try:
        import fcntl
    except ImportError:
        return
    own = lock_path_for(checkpoint).name
    try:
        with os.scandir(checkpoint.parent) as entries:
            locks = [entry.name for entry in entries if entry.name != own and entry.name.startswith(".") and entry.name.endswith(LOCK_SUFFIX)]
    except OSError:
        return
    for name in locks:
        try:
            fd = os.open(checkpoint.parent / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(checkpoint.parent / name)
        except OSError:  # held by a live save, or gone
            pass
        finally:
            os.close(fd)


def _remove_sidecars(checkpoint: Path) -> list[str]:
    """Step 4: the exported program, signature and records of next batches of the checkpoint being
    replaced; what was there."""
    from ._sidecars import next_batches_of, program_path_for
    from ._sidecars import signature_path_for

    companions = [("exported program", program_path_for(checkpoint)), ("signature", signature_path_for(checkpoint))]
    with contextlib.suppress(OSError):
        with os.scandir(checkpoint.parent) as entries:
            companions += [("record of next batches", Path(entry.path)) for entry in entries if next_batches_of(entry.name) == checkpoint.name]
    removed = []
    for what, path in companions:
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(f"{what} {path.name}")
    return removed


def _discard_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # the next save settles it
        os.unlink(path)


def _reason(error: BaseException) -> str:
    if isinstance(error, WriteError):
        return str(error).rpartition(": ")[2]
    return getattr(error, "strerror", None) or str(error)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # platforms without directory handles
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
