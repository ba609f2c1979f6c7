"""A TensorFlow bundle and its manifest committed together, and the bundles past `max_to_keep`
removed without ever leaving a manifest that lists deleted files.

TensorFlow's own `tf.train.CheckpointManager.save` writes the bundle, names it in the state file
`checkpoint` and deletes the oldest bundles in one call, so a manifest written after it leaves the
latest bundle without one for the whole save, and a kill during the deletions leaves manifests
listing files already gone. Here the manager keeps the state file itself, the same file in the same
format, and one save of a directory runs at a time (the lock of its state file, see
`ckptspec._commit.serialised`). In order, a save:

1. settles what an interrupted save left: TensorFlow's staging directories `PREFIX_temp/` of the
   manager's bundles, the bundles a removal was interrupted in (a pending record beside them), and
   bundles newer than every kept one that the state file does not list (a save killed before it
   named them), with their manifests;
2. writes the new bundle under its own prefix, which the state file does not list: a bundle kept
   under the same number is first dropped from the state file and removed, as in step 5;
3. writes the new bundle's manifest, exported program and signature;
4. names the new bundle in the state file (TensorFlow's `latest_checkpoint`), without the bundles
   past `max_to_keep`: one atomic replacement of the file;
5. removes each bundle past `max_to_keep` as `Save.discard` removes a file: its manifest becomes
   its pending record, its files go (the index first), then the record.

Until 4 the state file names the previous bundle, whose manifest is in place; from 4 on it names
the new one, whose manifest was written at 3. A bundle the state file does not list is never read
by a restore; `audit` reports it as discarded (`ckptspec._commit.discarded_bundles`), not damaged.
The one exception is a save under the number of the only bundle kept (`checkpoint_number=`): it is
rewritten in place, as TensorFlow does, so a kill then leaves no bundle to resume.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path

import tensorflow as tf
from google.protobuf import text_format

from .._dataclass import dataclass
from .._atomic import atomic_write_bytes
from .._commit import Save, pending_path_for, serialised, tensorflow_staging_of
from .._sidecars import manifest_path_for, signature_path_for
from .._exceptions import ReaderError, WriteError
from .._models import Manifest
from .._records import write_manifest
from ..formats._names import STATE_FILE_NAME, tf_shard_prefix
from ..formats.keras_export import keras_program_path_for
from ..formats.tf_state import read_checkpoint_state
from ..signing import sign_at_save

__all__ = ["BundleSave", "KeptBundles", "bundle_saving", "kept_bundles"]


@dataclass
class KeptBundles:
    """What the state file of a directory says: the bundles a manager keeps, oldest first."""

    latest: Path | None = None
    prefixes: list[Path] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    last_preserved: float | None = None
    """Bundles saved at or before this time are no longer managed (TensorFlow's `keep_checkpoint_every_n_hours`)."""


def kept_bundles(directory: Path) -> KeptBundles:
    """The state file of `directory` as `tf.train.CheckpointManager` reads it: a bundle listed with a
    timestamp not after `last_preserved_timestamp` is no longer managed. Raises `ReaderError` for a
    state file that cannot be read."""
    if not os.path.lexists(directory / STATE_FILE_NAME):
        return KeptBundles()
    state = read_checkpoint_state(directory)
    paths = list(state.all_model_checkpoint_paths)
    preserved = state.last_preserved_timestamp
    timestamps = list(state.all_model_checkpoint_timestamps) or [preserved or 0.0] * len(paths)
    managed = [(path, stamp) for path, stamp in zip(paths, timestamps) if preserved is None or stamp > preserved]
    return KeptBundles(
        latest=state.model_checkpoint_path,
        prefixes=[path for path, _ in managed],
        timestamps=[stamp for _, stamp in managed],
        last_preserved=preserved,
    )


class BundleSave:
    """One save of a bundle into a manager's directory, from `bundle_saving`."""

    def __init__(self, directory: Path, checkpoint_name: str, kept: KeptBundles) -> None:
        self.directory = directory
        self.checkpoint_name = checkpoint_name
        self.kept = kept
        self.prefix: Path | None = None
        """The new bundle, once its number is known."""
        self.step = "the bundle could not be written"
        """What a failure now means, in words."""
        self.committed = False
        """Whether the state file names the new bundle."""

    def prefix_for(self, number: int) -> Path:
        """Step 2's prefix for bundle `number`. Whatever lies under it goes first (TensorFlow would
        write over it), once the state file no longer lists it."""
        prefix = self.directory / f"{self.checkpoint_name}-{number}"
        if prefix in self.kept.prefixes:
            index = self.kept.prefixes.index(prefix)
            del self.kept.prefixes[index], self.kept.timestamps[index]
            if self.kept.prefixes:
                self.kept.latest = self.kept.prefixes[-1]
                self._record(self.kept)
        _remove_bundle(prefix)
        _remove_staging(prefix)
        self.prefix = prefix
        return prefix

    def write_manifest(self, manifest: Manifest, signing_key: str | os.PathLike[str] | None) -> None:
        """Step 3: the new bundle's manifest, and its signature when a key is given."""
        assert self.prefix is not None
        self.step = "its manifest could not be written"
        write_manifest(manifest, self.prefix, durable=False)
        self.step = "it could not be signed"
        sign_at_save(self.prefix, signing_key)

    def commit(self, max_to_keep: int | None) -> list[Path]:
        """Steps 4 and 5: the state file names the new bundle, and the bundles past `max_to_keep` go;
        returns those removed."""
        assert self.prefix is not None
        prefixes = [*self.kept.prefixes, self.prefix]
        timestamps = [*self.kept.timestamps, time.time()]
        swept = max(len(prefixes) - max_to_keep, 0) if max_to_keep else 0
        self.step = "the state file could not name it"
        self._record(KeptBundles(self.prefix, prefixes[swept:], timestamps[swept:], self.kept.last_preserved))
        self.committed = True
        for prefix in prefixes[:swept]:
            _remove_bundle(prefix)
        return prefixes[:swept]

    def discard_new(self) -> None:
        """Remove what a failed save wrote of its bundle; the state file never named it."""
        if self.prefix is not None:
            with contextlib.suppress(OSError, WriteError):  # the next save settles what is left
                _remove_bundle(self.prefix)
                _remove_staging(self.prefix)

    def settle(self) -> None:
        """Step 1 (see the module docstring); only where a state file says which bundles are kept."""
        if self.kept.latest is None:
            return
        pattern = re.compile(rf"{re.escape(self.checkpoint_name)}-(\d+)")
        newest = max((_number(prefix, pattern) for prefix in self.kept.prefixes), default=-1)
        try:
            names = os.listdir(self.directory)
        except OSError:
            return  # writing the bundle says why the directory cannot be used
        for prefix in sorted({self.directory / name for name in map(_prefix_named, names) if name}):
            number = _number(prefix, pattern)
            if number is None or prefix in self.kept.prefixes or prefix == self.kept.latest:
                continue
            if os.path.lexists(pending_path_for(prefix)) or number > newest:
                _remove_bundle(prefix)
                _discard_quietly(pending_path_for(prefix))
        for name in names:
            staging = self.directory / name
            if name.endswith("_temp") and pattern.fullmatch(name[: -len("_temp")]) and tensorflow_staging_of(staging):
                _remove_staging(staging.with_name(name[: -len("_temp")]))

    def kept_now(self) -> str:
        """What a save that fails now keeps, in words."""
        latest = self.kept.latest
        if latest is None or not os.path.lexists(f"{latest}.index"):
            return "no earlier bundle is kept, and nothing of the new one is left"
        described = "and its manifest are" if manifest_path_for(latest).is_file() else "is (it has no manifest)"
        return f"the latest bundle {latest.name} {described} kept, and the state file names it"

    def _record(self, kept: KeptBundles) -> None:
        """Replace the state file in one step with what `kept` holds, the paths relative to the directory."""
        assert kept.latest is not None
        relative = [os.path.relpath(prefix, self.directory) for prefix in kept.prefixes]
        state = tf.compat.v1.train.generate_checkpoint_state_proto(
            os.path.abspath(self.directory),
            os.path.relpath(kept.latest, self.directory),
            all_model_checkpoint_paths=relative,
            all_model_checkpoint_timestamps=list(kept.timestamps),
            last_preserved_timestamp=kept.last_preserved,
        )
        atomic_write_bytes(self.directory / STATE_FILE_NAME, text_format.MessageToString(state).encode(), durable=False)
        self.kept = kept


@contextlib.contextmanager
def bundle_saving(directory: Path, checkpoint_name: str) -> Iterator[BundleSave]:
    """The one save of a bundle into `directory` in progress (see the module docstring); a failure
    before the state file names the new bundle removes it and raises `WriteError` saying what is kept."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"{directory}: not saved: cannot create the directory ({exc.strerror}); nothing was changed") from None
    with serialised(directory / STATE_FILE_NAME):
        try:
            kept = kept_bundles(directory)
        except ReaderError as exc:
            raise WriteError(f"{directory}: not saved: its state file cannot be read ({exc}); nothing was changed") from None
        save = BundleSave(directory, checkpoint_name, kept)
        try:
            save.settle()
            yield save
        except (OSError, WriteError, tf.errors.OpError) as exc:
            if save.committed:
                raise WriteError(f"{save.prefix}: saved with its manifest, and the state file names it; but then: {_reason(exc)}") from None
            save.discard_new()
            what = save.prefix if save.prefix is not None else directory
            raise WriteError(f"{what}: not saved: {save.step} ({_reason(exc)}); {save.kept_now()}") from None


def _remove_bundle(prefix: Path) -> None:
    """Remove a bundle the state file no longer names, as `Save.discard` removes a file: its
    manifest set aside as the pending record first, its exported program, signature and files
    (the index first: without it no reader takes the rest for a bundle), the record last."""

    def remove() -> None:
        for path in (keras_program_path_for(prefix), signature_path_for(prefix), Path(f"{prefix}.index"), *_data_shards(prefix)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    Save(prefix, durable=False).discard(remove)


def _remove_staging(prefix: Path) -> None:
    """Remove TensorFlow's staging directory `PREFIX_temp/` of an interrupted write of `prefix`."""
    import shutil

    staging = prefix.with_name(f"{prefix.name}_temp")
    if tensorflow_staging_of(staging) is not None:
        shutil.rmtree(staging, ignore_errors=True)


def _data_shards(prefix: Path) -> list[Path]:
    try:
        names = os.listdir(prefix.parent)
    except FileNotFoundError:
        return []
    return [prefix.parent / name for name in names if tf_shard_prefix(name) == prefix.name]


def _prefix_named(name: str) -> str | None:
    """The bundle prefix a file named `name` belongs to (its index, a data shard, its manifest or
    pending record); None for another file."""
    for suffix in (".index", ".ckptspec.yaml", ".ckptspec.pending.yaml"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return tf_shard_prefix(name)


def _number(prefix: Path, pattern: re.Pattern[str]) -> int | None:
    match = pattern.fullmatch(prefix.name)
    return int(match.group(1)) if match else None


def _discard_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _reason(error: BaseException) -> str:
    """The system's reason, in TensorFlow's words or without the path a `WriteError` names (the message names the bundle)."""
    if isinstance(error, tf.errors.OpError):  # TensorFlow's own words, without the op's name
        return re.sub(r"^\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]$", "", error.message)
    if isinstance(error, WriteError):
        return str(error).rpartition(": ")[2]
    return getattr(error, "strerror", None) or str(error)
