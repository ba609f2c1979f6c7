"""How the Lightning callback's manifests are written with every save a Trainer makes.

The strategy's CheckpointIO is wrapped, so a file is staged and committed with its manifest; a
strategy that writes a sharded directory itself has its `save_checkpoint` wrapped the same way; and
ModelCheckpoint's `last.ckpt` links get a manifest link beside them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._documents import load_manifest, save_document
from .._sidecars import manifest_path_for
from .._exceptions import AdapterError, WriteError
from .._models import FileEntry, Manifest
from ..signing import remove_sidecars
from .._commit import as_committed, saving
from .._records import file_algorithms, file_entry, saved_algorithms, write_manifest
from .._scan import Algorithm, FileDigests
from . import import_installed_frameworks

NAMESPACES = import_installed_frameworks("lightning.pytorch", "pytorch_lightning", extra="lightning")

from ._lineage import ledger_for  # noqa: E402
from ._torch_io import WrittenFile, load_failure, write_staged  # noqa: E402
from ._torch_tensors import hyperparameters_form, omegaconf_content  # noqa: E402

if TYPE_CHECKING:
    from ..lightning import CkptspecCallback

__all__ = ["NAMESPACES", "ManifestCheckpointIO", "mirror_last_links", "wrap_checkpoint_io", "wrap_strategy_saves"]

_PLAIN_IOS = {namespace.plugins.TorchCheckpointIO for namespace in NAMESPACES}


class ManifestCheckpointIO(*(namespace.plugins.CheckpointIO for namespace in NAMESPACES)):  # type: ignore[misc]
    """Delegates to the strategy's CheckpointIO; writes the manifest after each file, removes it with the file."""

    def __init__(self, inner: Any, callback: CkptspecCallback) -> None:
        self.inner = inner
        self.callback = callback

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        remote = storage_options is not None or "://" in str(path)
        path = Path(path)
        if remote:
            self._save_unstaged(checkpoint, path, storage_options)
            return
        if type(self.inner) not in _PLAIN_IOS:
            self._save_through_inner(checkpoint, path)
            return
        # Lightning's own local writer is replaced by torch.save into a staged file, committed with
        # its manifest (see `ckptspec._commit`); the file's digests and the tensors' CRC32Cs are
        # taken from the bytes as they are written.
        algorithms = saved_algorithms(file_algorithms(self.callback.spec))
        path.parent.mkdir(parents=True, exist_ok=True)
        with saving(path) as commit:
            with commit.file() as staged:
                written = write_staged(checkpoint, staged, algorithms=algorithms)
                manifest = self._manifest(checkpoint, path, algorithms, written)
                commit.commit(staged, manifest)
            ledger_for(self.callback._module).saved(path, manifest)
            self.callback.write_sidecars(checkpoint, path)

    def _save_through_inner(self, checkpoint: dict[str, Any], path: Path) -> None:
        """A CheckpointIO of the user's own, on a local path: it writes `NAME` in a staging directory
        beside the checkpoint, and the file is committed with its manifest as Lightning's own writer
        is; files it writes beside `NAME` are moved beside the checkpoint after it."""
        algorithms = file_algorithms(self.callback.spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        with saving(path) as commit:
            with commit.directory() as staged:
                self.inner.save_checkpoint(checkpoint, staged.temporary)
                manifest = self._manifest(checkpoint, path, algorithms, None, written_at=staged.temporary)
                commit.commit(staged, manifest)
                _move_beside(staged.temporary.parent, path)
            ledger_for(self.callback._module).saved(path, manifest)
            self.callback.write_sidecars(checkpoint, path)

    def _save_unstaged(self, checkpoint: dict[str, Any], path: Path, storage_options: Any) -> None:
        """A save to storage that cannot be staged (a URL, storage options): the previous manifest
        goes first, and the file and the tensors are read once afterwards."""
        remove_sidecars(path)  # never leave an old manifest, program or signature describing a new file
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        manifest = self._manifest(checkpoint, path, file_algorithms(self.callback.spec), None)
        write_manifest(manifest, path, durable=False)
        ledger_for(self.callback._module).saved(path, manifest)
        self.callback.write_sidecars(checkpoint, path)

    def _manifest(
        self, checkpoint: dict[str, Any], path: Path, algorithms: tuple[Algorithm, ...], written: WrittenFile | None, *, written_at: Path | None = None
    ) -> Manifest:
        """The manifest of the checkpoint saved at `path`, its file read where it lies now (`written_at`, before its commit)."""
        components = self.callback.components(checkpoint, written.storage_crc32c if written is not None else None)
        at = written_at or path
        files = [
            file_entry(
                at,
                at.parent,
                algorithms=algorithms,
                digests=written.digests if written is not None else None,
                size=written.size if written is not None else None,
            )
        ]
        return self.callback.describe(path, files, components, _unrecorded_hyperparameters(checkpoint))

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return self.inner.load_checkpoint(path, *args, **kwargs)
        except Exception as exc:
            if type(self.inner) not in _PLAIN_IOS or "://" in str(path):
                raise  # a storage of its own: its error is the one to show
            raise load_failure(Path(path), exc) from None

    def remove_checkpoint(self, path: Any) -> None:
        """`save_top_k` drops a checkpoint: its manifest is set aside first (see `Save.discard`),
        so that no manifest lists a removed file."""
        path = Path(path)
        with saving(path) as commit:
            commit.discard(lambda: self.inner.remove_checkpoint(path))

    def teardown(self) -> None:
        self.inner.teardown()


_ASYNC_IOS = tuple(namespace.plugins.AsyncCheckpointIO for namespace in NAMESPACES)


def wrap_checkpoint_io(strategy: Any, callback: CkptspecCallback) -> None:
    """Commit every file the strategy's CheckpointIO writes with its manifest. Under an
    `AsyncCheckpointIO`, which hands each save to a thread and returns before the file exists, the
    wrapper goes around the IO it saves through, so the thread writes the file and its manifest
    together (the next save, or the end of `fit`, raises what went wrong there)."""
    io = strategy.checkpoint_io
    if not isinstance(io, _ASYNC_IOS):
        if not isinstance(io, ManifestCheckpointIO):
            strategy.checkpoint_io = ManifestCheckpointIO(io, callback)
        return
    while isinstance(io.checkpoint_io, _ASYNC_IOS):
        io = io.checkpoint_io
    if callback.export_program:
        raise AdapterError(
            "CkptspecCallback: export_program cannot follow an AsyncCheckpointIO: the program would be exported from "
            "the module as it trains on while the file is written; save synchronously, or without export_program"
        )
    if not isinstance(io.checkpoint_io, ManifestCheckpointIO):
        io._checkpoint_io = ManifestCheckpointIO(io.checkpoint_io, callback)  # its setter keeps a base IO once one is set


def wrap_strategy_saves(strategy: Any, callback: CkptspecCallback) -> None:
    """Write the manifest of every sharded directory the strategy saves, and after every save, on
    every rank, watch for the batches trained on next (`CkptspecCallback.expect_next_batches`).

    ModelParallelStrategy, and FSDPStrategy with sharded state dicts, save a directory of
    torch.distributed.checkpoint files and `meta.pt` themselves, never through the CheckpointIO.
    Their `save_checkpoint` is wrapped: every rank writes into one staging directory beside the
    checkpoint (its name broadcast from rank 0), which rank 0 commits with its manifest once the
    strategy returns (`.metadata` is written after every rank's data files, `meta.pt` after it);
    every rank then learns whether the commit held. A strategy that writes a directory otherwise
    (DeepSpeed) has the previous manifest removed before it writes, and the new one written after.
    A save that writes one file goes through the CheckpointIO as before.
    """
    original = strategy.save_checkpoint
    if getattr(original, "records_manifests", False):
        return

    def save_checkpoint(checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        path = Path(filepath)
        if storage_options is None and "://" not in str(filepath) and _writes_sharded_directory(strategy):
            _save_staged_directory(strategy, callback, original, checkpoint, path)
        else:
            _save_unstaged_directory(strategy, callback, original, checkpoint, filepath, storage_options)
        callback.expect_next_batches(path)

    save_checkpoint.records_manifests = True  # type: ignore[attr-defined]
    strategy.save_checkpoint = save_checkpoint


def _save_unstaged_directory(strategy: Any, callback: CkptspecCallback, original: Any, checkpoint: dict[str, Any], filepath: Any, storage_options: Any) -> None:
    """A save through the CheckpointIO (which commits a file with its manifest), or a directory a
    strategy writes its own way: its previous manifest removed first, the new one written after."""
    path = Path(filepath)
    if strategy.is_global_zero and path.is_dir():
        remove_sidecars(path)  # never leave an old manifest describing a new directory
    original(checkpoint, filepath, storage_options=storage_options)
    if strategy.is_global_zero and path.is_dir():
        manifest = callback.directory_manifest(path, checkpoint)
        write_manifest(manifest, path, durable=False)
        ledger_for(callback._module).saved(path, manifest)
        callback.write_sidecars(checkpoint, path)


def _writes_sharded_directory(strategy: Any) -> bool:
    """Whether the strategy's next save writes a sharded directory of DCP files (ModelParallelStrategy
    by default, FSDPStrategy with `state_dict_type="sharded"`)."""
    return getattr(strategy, "_save_distributed_checkpoint", False) is True or getattr(strategy, "_state_dict_type", None) == "sharded"


def _save_staged_directory(strategy: Any, callback: CkptspecCallback, original: Any, checkpoint: dict[str, Any], path: Path) -> None:
    """Every rank saves into the staging directory rank 0 names, rank 0 commits it with its
    manifest (see `ckptspec._commit`), and every rank raises rank 0's `WriteError` if it failed."""
    if not strategy.is_global_zero:
        staging, failure = strategy.broadcast((None, None))
        if staging is not None:
            original(checkpoint, staging)
            failure = strategy.broadcast(None)
        if failure is not None:
            raise WriteError(failure)
        return
    with contextlib.ExitStack() as held:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            commit = held.enter_context(saving(path))
            staged = held.enter_context(commit.tree())
        except (OSError, WriteError) as exc:
            failure = exc if isinstance(exc, WriteError) else WriteError(f"{path}: not saved: {exc.strerror or exc}; nothing was changed")
            strategy.broadcast((None, str(failure)))
            raise failure from None
        strategy.broadcast((str(staged.temporary), None))
        try:
            original(checkpoint, staged.temporary)
            manifest = as_committed(callback.directory_manifest(staged.temporary, checkpoint), staged)
            commit.commit(staged, manifest)
        except Exception as exc:  # the other ranks wait for the outcome: they raise it too
            strategy.broadcast(str(exc) if isinstance(exc, WriteError) else f"{path}: not saved on rank 0: {type(exc).__name__}: {exc}")
            raise
        strategy.broadcast(None)
    ledger_for(callback._module).saved(path, manifest)
    callback.write_sidecars(checkpoint, path)


def _move_beside(staging: Path, checkpoint: Path) -> None:
    """Move what a CheckpointIO wrote into `staging` besides the checkpoint itself to the checkpoint's directory."""
    for entry in staging.iterdir():
        if entry.name != checkpoint.name:
            os.replace(entry, checkpoint.parent / entry.name)


def _remove_manifest(checkpoint: Path) -> None:
    manifest = manifest_path_for(checkpoint)
    if os.path.lexists(manifest):
        manifest.unlink()


def mirror_last_links(checkpoint_callback: Any) -> None:
    """After ModelCheckpoint links `last.ckpt` to a checkpoint (save_last="link"), link the manifests too.

    ModelCheckpoint makes the link with its own `_link_checkpoint` and not through CheckpointIO, so the
    instance's method is wrapped; it exists in every Lightning 2.x ModelCheckpoint.
    """
    original = getattr(checkpoint_callback, "_link_checkpoint", None)
    if original is None or getattr(original, "mirrors_manifests", False):
        return

    def link_checkpoint(trainer: Any, filepath: str, linkpath: str) -> None:
        original(trainer, filepath, linkpath)
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            _link_manifest(Path(filepath), Path(linkpath))

    link_checkpoint.mirrors_manifests = True  # type: ignore[attr-defined]
    checkpoint_callback._link_checkpoint = link_checkpoint


def _link_manifest(target: Path, link: Path) -> None:
    _remove_manifest(link)
    if link.is_symlink():
        os.symlink(os.path.relpath(manifest_path_for(target), link.parent), manifest_path_for(link))
    elif link.is_file():  # ModelCheckpoint copies where symlinks are not allowed
        manifest = load_manifest(manifest_path_for(target))
        copied = manifest.model_copy(
            update={"checkpoint": link.name, "files": [file_entry(link, link.parent, algorithms=_recorded_algorithms(manifest.files[0]))]}
        )
        save_document(copied, manifest_path_for(link), durable=False)


def _recorded_algorithms(entry: FileEntry) -> tuple[Algorithm, ...]:
    return FileDigests(crc32c=entry.crc32c, sha256=entry.sha256).algorithms


def _unrecorded_hyperparameters(checkpoint: Mapping[str, Any]) -> list[str]:
    """The parts of the saved hyper-parameters with no JSON form (a path, an enum, a class), at any
    depth, each named by its path, so none is dropped silently."""
    saved = omegaconf_content(checkpoint.get("hyper_parameters", {}))
    if not isinstance(saved, Mapping):
        return []
    form = hyperparameters_form()
    form.hyperparameters(saved, "config.hyperparameters")
    return form.left_out

