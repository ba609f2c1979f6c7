"""Keras adapter: a manifest beside every file Keras' own checkpoint callbacks write, and checked loads.

Example:

```python
import keras
import ckptspec.keras

checkpoint = keras.callbacks.ModelCheckpoint("runs/epoch-{epoch:02d}.keras", save_best_only=True)
backup = keras.callbacks.BackupAndRestore("runs/backup")
model.fit(x, y, epochs=10, callbacks=[ckptspec.keras.ManifestCallback(checkpoint, backup, spec="ckptspec.yaml")])

model = ckptspec.keras.load_model("runs/epoch-07.keras")          # RestoreError if anything differs
report = ckptspec.keras.load_weights(rebuilt, "runs/backup/latest.weights.h5")
```
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

try:
    import keras
except ImportError as exc:  # pragma: no cover - exercised without Keras installed
    raise ImportError("ckptspec.keras needs Keras 3: pip install 'ckptspec[tensorflow]'") from exc

from ._commit import manifest_choice, saving
from ._documents import load_manifest
from ._sidecars import manifest_path_for
from ._exceptions import AdapterError, DocumentError, RestoreError
from ._models import Manifest, Requirement, Spec
from ._records import write_manifest
from .signing import sign_at_save
from ._validate import validate
from .adapters._keras_manifest import Position, describe_keras_layers, keras_manifest
from .adapters._lineage import ledger_for
from .adapters._report import RestoreReport, restored_components
from .adapters._spec import COMPONENTS, as_spec, effective_spec, find_manifest, raise_if_unmet, requirement, unmet_components
from .adapters._tf_restore import check_config, check_optimizer_settings, check_recorded_components

__all__ = ["ManifestCallback", "load_model", "load_weights"]

_NEVER_SAVED = ("scheduler", "scaler", "ema", "rng", "fingerprint")
"""Components no Keras file holds and this adapter does not record."""
_WATCHED = (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)


class ManifestCallback(keras.callbacks.Callback):
    """Runs Keras' `ModelCheckpoint` and `BackupAndRestore` callbacks and writes `<file>.ckptspec.yaml`
    beside every file they write, as they write it.

    Pass the Keras callbacks to it instead of to `fit`: each save goes through this callback, so a
    manifest exists exactly for the files written (`save_best_only`, `save_weights_only` and `save_freq`
    decide which, as always). Keras writes each file under its own name in a staging directory
    beside it, and the file and its manifest then replace the previous pair together (see
    `ckptspec._commit`): a save killed or failed at any moment leaves the previous pair or the new
    one. `BackupAndRestore` deleting its backup directory deletes the manifests with it. When
    `BackupAndRestore` resumes an interrupted run from its backup, the load is checked as
    `load_weights` checks it.

    Args:
        *callbacks (`ModelCheckpoint | BackupAndRestore`): the Keras callbacks to run.
        spec (`Spec | str | os.PathLike`, *optional*): what every file must hold; checked now, embedded
            in each manifest.
        signing_key (`str | os.PathLike`, *optional*): sign each file with its manifest using this
            private key (PEM); defaults to the `CKPTSPEC_SIGNING_KEY` environment variable when set.

    Raises:
        `AdapterError` for another kind of callback, or a spec requiring what no Keras file holds;
        `RestoreError` from `fit` when a backup to resume from differs from its manifest, or the model
        is not built as the one that wrote it.
    """

    def __init__(
        self,
        *callbacks: keras.callbacks.Callback,
        spec: Spec | str | os.PathLike[str] | None = None,
        signing_key: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        foreign = [type(callback).__name__ for callback in callbacks if not isinstance(callback, _WATCHED)]
        if foreign or not callbacks:
            raise AdapterError(
                f"ManifestCallback runs ModelCheckpoint and BackupAndRestore callbacks, not {', '.join(foreign) or 'none'}"
            )
        self.callbacks = callbacks
        self.spec = as_spec(spec)
        self.signing_key = signing_key
        if self.spec is not None:
            _check_spec(self.spec)
        self._epoch = 0
        self._batch: int | None = None
        self._resumed: tuple[Path, int] | None = None
        """The backup resumed from and the optimizer's iteration count it holds, until the first batch."""

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        for callback in self.callbacks:
            callback.set_model(_CheckedModel(model, self._saving, self._loading))

    def set_params(self, params: Mapping[str, Any]) -> None:
        super().set_params(params)
        for callback in self.callbacks:
            callback.set_params(params)

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        for callback in self.callbacks:
            callback.on_train_begin(logs)

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        for callback in self.callbacks:
            callback.on_train_end(logs)

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch, self._batch = epoch, None
        for callback in self.callbacks:
            callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch, self._batch = epoch + 1, None
        for callback in self.callbacks:
            callback.on_epoch_end(epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._resumed is not None:
            resumed, self._resumed = self._resumed, None
            self._attest(*resumed)
        for callback in self.callbacks:
            callback.on_train_batch_begin(batch, logs)

    def _attest(self, path: Path, saved_iterations: int) -> None:
        """Before the first step after a resume, once every callback's `on_train_begin` has run: the
        live optimizer's iteration count against the saved one (a later callback, or a load that
        skipped the optimizer's variables with a warning, leaves it elsewhere)."""
        live = int(self.model.optimizer.iterations.numpy())
        if live != saved_iterations:
            raise RestoreError(
                f"{path}: optimizer: its iteration count is {live} before the first step, {saved_iterations} when saved: "
                "its state was not restored or was reset after the restore, and its schedule and moments start elsewhere"
            )
        ledger_for(self.model).attested(["optimizer"])

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._batch = batch + 1
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs)

    def _loading(self, filepath: str | os.PathLike[str], load: Callable[[], None]) -> None:
        """`BackupAndRestore` resumes an interrupted run from its backup: checked, then the run's next save names it as its parent."""
        path = Path(filepath)
        manifest, spec = _checked_file(path, self.spec)
        _check_built_as_saved(path, manifest, spec, self.model)
        load()
        ledger_for(self.model).resumed(path, manifest_choice(path).path, manifest)
        position = manifest.components.data_position
        if self.model.optimizer is not None and position is not None and position.global_step is not None:
            self._resumed = (path, position.global_step)

    def _saving(self, filepath: str | os.PathLike[str], save: Callable[[Path], None]) -> None:
        path = Path(filepath)
        _copy_manifest_of_backup(path)
        position = Position(epoch=self._epoch, batch_in_epoch=self._batch)
        path.parent.mkdir(parents=True, exist_ok=True)
        ledger = ledger_for(self.model)
        with saving(path) as commit:
            with commit.directory() as staged:
                save(staged.temporary)
                manifest = ledger.stamp(keras_manifest(staged.temporary, self.model, self.spec, position), path)
                commit.commit(staged, manifest)
            ledger.saved(path, manifest)
            sign_at_save(path, self.signing_key)


_Through = Callable[[str | os.PathLike[str], Callable[[Path], None]], None]
_Loads = Callable[[str | os.PathLike[str], Callable[[], None]], None]


class _CheckedModel:
    """The model as the wrapped callbacks see it: the model itself, except that its saves and loads go
    through the `ManifestCallback`, which thereby knows each file written and checks each file loaded."""

    def __init__(self, model: keras.Model, saving: _Through, loading: _Loads) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_saving", saving)
        object.__setattr__(self, "_loading", loading)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._model, name, value)

    def save(self, filepath: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        self._saving(filepath, lambda staged: self._model.save(staged, *args, **kwargs))

    def save_weights(self, filepath: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        self._saving(filepath, lambda staged: self._model.save_weights(staged, *args, **kwargs))

    def load_weights(self, filepath: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        self._loading(filepath, lambda: self._model.load_weights(filepath, *args, **kwargs))


def _copy_manifest_of_backup(path: Path) -> None:
    """`BackupAndRestore(double_checkpoint=True)` copies its backup to `<file>.bkp` before it saves
    again; the copy's manifest is the original's, renamed."""
    backup = Path(f"{path}.bkp")
    source = manifest_path_for(path)
    if not backup.is_file() or not source.is_file():
        return
    try:
        manifest = load_manifest(source)
    except DocumentError:
        return  # a manifest that cannot be read is not copied: the backup then has none, which validate reports
    manifest.checkpoint = backup.name
    for entry in manifest.files:
        if entry.path == path.name:
            entry.path = backup.name
    write_manifest(manifest, backup, durable=False)


def _check_spec(spec: Spec) -> None:
    problems = [
        f"components.{name} is required, but no Keras file holds one"
        for name in _NEVER_SAVED
        if requirement(spec, name) is Requirement.required
    ]
    problems += unmet_components(spec, {"optimizer": True, "data_position": True})
    raise_if_unmet(spec, problems, by="the Keras callbacks")


# --------------------------------------------------------------------------------------------------
# Checked loads


def load_model(path: str | os.PathLike[str], *, spec: Spec | str | os.PathLike[str] | None = None, **kwargs: Any) -> keras.Model:
    """`keras.models.load_model`, after the file passed validation against its manifest, and checked after.

    The file is validated first (tensor checksums, the code its config.json names), so nothing is
    deserialized from a file that differs from what was saved; the loaded model's layer constants and
    optimizer settings are then compared with the manifest. `kwargs` go to `keras.models.load_model`.

    Raises:
        `RestoreError` naming each finding, layer constant or optimizer setting that differs.
    """
    path = Path(path)
    manifest, chosen = _checked_file(path, spec)
    model = keras.models.load_model(path, **kwargs)
    _check_built_as_saved(path, manifest, chosen, model)
    return model


def load_weights(model: keras.Model, path: str | os.PathLike[str], *, spec: Spec | str | os.PathLike[str] | None = None) -> RestoreReport:
    """`model.load_weights(path)`, refused before anything is loaded when the file fails validation
    against its manifest or the model is not built as the saved one was (a BatchNormalization with
    another epsilon, a Dense with another activation, another optimizer setting).

    Raises:
        `RestoreError` naming each finding, layer constant or optimizer setting that differs.
    """
    path = Path(path)
    manifest, chosen = _checked_file(path, spec)
    _check_built_as_saved(path, manifest, chosen, model)
    model.load_weights(path)
    return _report(path, manifest)


def _checked_file(path: Path, spec: Spec | str | os.PathLike[str] | None) -> tuple[Manifest, Spec]:
    try:
        manifest = load_manifest(find_manifest(path))
    except DocumentError as exc:
        raise RestoreError(f"{path}: cannot check the load: its manifest cannot be read ({exc})") from exc
    chosen = effective_spec(as_spec(spec), manifest)
    check_recorded_components(path, manifest, chosen)
    errors = validate(path, chosen).errors
    if errors:
        listed = "".join(f"\n  - {finding.code} {finding.name}: {finding.message}" for finding in errors)
        raise RestoreError(f"{path}: refused: the file does not pass validation against its manifest:{listed}")
    return manifest, chosen


def _check_built_as_saved(path: Path, manifest: Manifest, spec: Spec, model: keras.Model) -> None:
    check_config(path, manifest, describe_keras_layers(model), spec)
    if model.optimizer is not None:
        check_optimizer_settings(path, manifest, model.optimizer, {})


def _report(path: Path, manifest: Manifest) -> RestoreReport:
    restored, not_restored = restored_components(manifest, {name: True for name in COMPONENTS})
    tensors = manifest.components.model.tensors if manifest.components.model else []
    position = manifest.components.data_position
    return RestoreReport(
        checkpoint=path,
        restored=restored,
        not_restored=not_restored,
        tensors_saved=len(tensors),
        tensors_loaded=len(tensors),
        left_fresh=(),
        ignored=(),
        generators=(),
        changes=(),
        data_position=position.model_dump(include={"epoch", "global_step", "batch_in_epoch"}) if position else {},
        fingerprint=None,
    )
