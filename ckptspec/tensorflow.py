"""TensorFlow / Keras adapter: save complete checkpoints with their manifest, and restore them with enforcement.

Example:

```python
import tensorflow as tf
import ckptspec.tensorflow

manager = ckptspec.tensorflow.CheckpointManager(
    "runs/ckpts", model=model, optimizer=optimizer, generators={"noise": noise},
    iterator=iterator, fingerprint_batch=x_fixed, spec="ckptspec.yaml", max_to_keep=3,
)
if manager.latest_checkpoint:
    report = manager.restore()                # raises RestoreError naming what would silently differ
for x, y in ...:
    train_step(x, y)
    manager.save()                            # writes ckpt-N.index/.data-* and ckpt-N.ckptspec.yaml
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import keras
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without TensorFlow
    raise ImportError(
        "ckptspec.tensorflow needs TensorFlow and Keras: pip install 'ckptspec[tensorflow]'"
    ) from exc

from ._commit import manifest_choice
from ._exceptions import AdapterError, RestoreError, RestoreNote
from ._models import Manifest, Requirement, Spec
from ._models.common import JSONValue
from .adapters._lineage import ledger_for
from .adapters._overrides import checked_overrides
from .adapters._report import FingerprintReplay, HyperparameterChange, RestoreReport
from .adapters._spec import as_spec, effective_spec, raise_if_unmet, requirement, unmet_components
from .adapters._tf_commit import bundle_saving, kept_bundles
from .adapters._tf_config import describe_layers, optimizer_hyperparameters, schedule_config, variable_names
from .adapters._tf_export import export_keras, keras_weight_map
from .adapters._tf_graph import GraphMatch, match_graph, untracked_variables
from .adapters._tf_load import apply_overrides, constant_learning_rate, load_bundle, manifest_to_check, restore_report
from .adapters._tf_manifest import SavedState, build_manifest
from .adapters._tf_restore import (
    check_before_loading,
    check_consumed,
    check_counters,
    check_generators,
    replay_fingerprint,
    restore_global_generators,
)
from .adapters._tf_rng import GLOBAL_GENERATORS, capture_state
from .formats.tfbundle import open_bundle

__all__ = [
    "CheckpointCallback",
    "CheckpointManager",
    "FingerprintReplay",
    "HyperparameterChange",
    "RestoreNote",
    "RestoreReport",
]

_UNSUPPORTED_COMPONENTS = ("scaler", "ema")
_ARGUMENTS = {"optimizer": "optimizer", "rng": "generators", "fingerprint": "fingerprint_batch"}
"""The argument that supplies each component, where it is not the component's name."""
_KERAS_VARIABLES = "keras_variables"
"""Where the manager tracks model variables Keras hides from `tf.train.Checkpoint` (seed generator states)."""
_GLOBAL_STATES = "rng"
"""Where the manager tracks the serialized states of the Python and NumPy global generators."""


class CheckpointManager:
    """Saves bundles as `tf.train.CheckpointManager` does (the same names, the same state file
    `checkpoint`), each with `<prefix>.ckptspec.yaml` beside it, committed together: a save killed at
    any moment leaves the state file naming a bundle with its manifest (see docs/crash-safety.md).

    Args:
        directory (`str | Path`): where the bundles, the `checkpoint` state file and the manifests go.
        model (`keras.Model`): saved under `model`; its layers' constants are recorded from `get_config()`.
        optimizer (`keras.optimizers.Optimizer`, *optional*): saved under `optimizer` (iterations, learning
            rate, slots); built over `model.trainable_variables` if it is not built yet.
        generators (`Mapping[str, tf.random.Generator]`, *optional*): saved under `generators/<name>`.
        global_generators (`Sequence[str]`, *optional*): which process-wide generators to save under
            `rng/<name>` and restore: `"python"` (`random`) and/or `"numpy"` (the global legacy
            `numpy.random` state, not a `default_rng()` Generator). Defaults to both, or none when the spec
            forbids `rng`.
        iterator (`tf.data.Iterator`, *optional*): saved under `iterator`; it is the data position.
        step (`tf.Variable`, *optional*, defaults to `optimizer.iterations`): the global step.
        epoch (`tf.Variable`, *optional*): epochs completed; the manager creates one when not given.
        fingerprint_batch (*optional*): a fixed input batch (tensor or nest of tensors), saved with the model's
            inference outputs on it, replayed at restore.
        spec (`Spec | str | os.PathLike`, *optional*): what every checkpoint must hold; checked when the manager is
            built, embedded in each manifest, enforced at restore.
        max_to_keep (`int`, *optional*, defaults to 5): older bundles and their manifests are deleted.
        checkpoint_name (`str`, *optional*, defaults to `"ckpt"`): bundles are named `<checkpoint_name>-<N>`.
        signing_key (`str | os.PathLike`, *optional*): sign each bundle with its manifest using this
            private key (PEM); defaults to the `CKPTSPEC_SIGNING_KEY` environment variable when set.
        export_program (`bool`, *optional*, defaults to False): also write `<prefix>.keras` (`model.save`)
            and record in the manifest which bundle key holds each of its weights, so that
            `ckptspec validate --replay` replays the fingerprint without the training code; needs
            `fingerprint_batch`.
        options (`tf.train.CheckpointOptions`, *optional*): passed to every save, e.g. an
            `experimental_sharding_callback` that splits the bundle into many shards.

    Raises:
        `AdapterError` when the spec requires a component that was not given.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer | None = None,
        generators: Mapping[str, tf.random.Generator] | None = None,
        global_generators: Sequence[str] | None = None,
        iterator: tf.data.Iterator | None = None,
        step: tf.Variable | None = None,
        epoch: tf.Variable | None = None,
        fingerprint_batch: Any = None,
        spec: Spec | str | os.PathLike[str] | None = None,
        max_to_keep: int | None = 5,
        checkpoint_name: str = "ckpt",
        signing_key: str | os.PathLike[str] | None = None,
        export_program: bool = False,
        options: tf.train.CheckpointOptions | None = None,
    ) -> None:
        if export_program and fingerprint_batch is None:
            raise AdapterError("CheckpointManager(export_program=True) needs fingerprint_batch: replay runs it")
        self.export_program = export_program
        self.spec = as_spec(spec)
        self.options = options
        self.signing_key = signing_key
        self.model = model
        self.optimizer = optimizer
        self.generators = dict(generators or {})
        self.global_generators = self._global_generator_names(global_generators)
        self._global_states = {
            name: tf.Variable(b"", dtype=tf.string, trainable=False, name=f"{name}_rng_state")
            for name in self.global_generators
        }
        self.iterator = iterator
        self.epoch = epoch if epoch is not None else tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step = step if step is not None else self._default_step()
        self._fingerprint_batch = fingerprint_batch
        self._fingerprint = tf.train.Checkpoint(inputs=[], outputs=[])
        self._keras_variables_tracked = False
        if self.spec is not None:
            self._check_spec_can_be_met(self.spec)
        self._try_fingerprint_batch()
        if max_to_keep is not None and max_to_keep <= 0:
            raise AdapterError(f"CheckpointManager(max_to_keep={max_to_keep}): keep at least one bundle, or pass None to keep every one")
        self.checkpoint = tf.train.Checkpoint(**self._tracked_objects())
        self._directory = Path(directory)
        self.max_to_keep = max_to_keep
        self.checkpoint_name = checkpoint_name

    def _global_generator_names(self, names: Sequence[str] | None) -> tuple[str, ...]:
        if names is None:
            forbidden = self.spec is not None and requirement(self.spec, "rng") is Requirement.forbidden
            return () if forbidden else GLOBAL_GENERATORS
        unknown = sorted(set(names) - set(GLOBAL_GENERATORS))
        if unknown:
            raise AdapterError(
                f"global_generators={list(names)!r}: {', '.join(unknown)} is not a process-wide generator; "
                f"choose from {', '.join(GLOBAL_GENERATORS)} (pass tf.random.Generators in generators=)"
            )
        return tuple(name for name in GLOBAL_GENERATORS if name in names)

    def _default_step(self) -> tf.Variable:
        if self.optimizer is None:
            return tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        return self.optimizer.iterations

    def _tracked_objects(self) -> dict[str, Any]:
        objects: dict[str, Any] = {"model": self.model, "epoch": self.epoch}
        if self.optimizer is not None:
            objects["optimizer"] = self.optimizer
        if self.optimizer is None or self.step is not self.optimizer.iterations:
            objects["step"] = self.step
        if self.generators:
            objects["generators"] = self.generators
        if self._global_states:
            objects[_GLOBAL_STATES] = self._global_states
        if self.iterator is not None:
            objects["iterator"] = self.iterator
        if self._fingerprint_batch is not None:
            objects["fingerprint"] = self._fingerprint
        return objects

    def _check_spec_can_be_met(self, spec: Spec) -> None:
        present = {
            "optimizer": self.optimizer is not None,
            "scheduler": self.optimizer is not None and schedule_config(self.optimizer) is not None,
            "rng": bool(self.generators) or bool(self.global_generators),
            "fingerprint": self._fingerprint_batch is not None,
        }
        problems = unmet_components(spec, present, given_as=_ARGUMENTS)
        problems += [
            f"components.{name} is required, but the TensorFlow adapter does not save a {name} yet"
            for name in _UNSUPPORTED_COMPONENTS
            if requirement(spec, name) is Requirement.required
        ]
        if requirement(spec, "rng") is Requirement.required:
            problems += self._unmet_generators(spec.components.rng.generators)
        raise_if_unmet(spec, problems, by="this checkpoint manager")

    def _unmet_generators(self, listed: Sequence[str]) -> list[str]:
        problems = []
        # 'cuda' is checked only where CUDA runs, i.e. never in a TensorFlow checkpoint.
        foreign = [name for name in listed if name not in ("tensorflow", "cuda", *GLOBAL_GENERATORS)]
        if foreign:
            problems.append(
                f"components.rng.generators lists {', '.join(foreign)}; a TensorFlow checkpoint saves "
                f"tf.random.Generator states ('tensorflow') and the {' and '.join(GLOBAL_GENERATORS)} global states"
            )
        if "tensorflow" in listed and not self.generators:
            problems.append("components.rng.generators lists tensorflow, but no generator was given (pass generators=)")
        left_out = [name for name in GLOBAL_GENERATORS if name in listed and name not in self.global_generators]
        if left_out:
            problems.append(
                f"components.rng.generators lists {', '.join(left_out)}, but global_generators= leaves it out"
            )
        return problems

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def checkpoints(self) -> list[Path]:
        """The kept bundles' prefixes, oldest first, as the state file `checkpoint` lists them."""
        return kept_bundles(self.directory).prefixes

    @property
    def latest_checkpoint(self) -> Path | None:
        """The bundle the state file names as the latest; None before the first save."""
        return kept_bundles(self.directory).latest

    def save(self, checkpoint_number: int | tf.Variable | None = None, *, batch_in_epoch: int | None = None) -> Path:
        """Save a bundle with its manifest, name it in the state file, then remove the bundles past
        `max_to_keep` (see `ckptspec.adapters._tf_commit`: a kill at any moment leaves the latest
        bundle with its manifest, and no manifest listing deleted files).

        Args:
            checkpoint_number (`int | tf.Variable`, *optional*): the bundle's number; defaults to
                the checkpoint's `save_counter`, which every save increments.

        Raises:
            `WriteError` when the bundle or its manifest cannot be written, saying what is kept.

        Returns:
            `Path`: the new bundle's prefix, e.g. `directory/ckpt-3`.
        """
        self._prepare_variables()
        self._record_fingerprint()
        self._record_global_generators()
        with bundle_saving(self.directory, self.checkpoint_name) as commit:
            counter = int(self.checkpoint.save_counter.assign_add(1))
            number = counter if checkpoint_number is None else int(checkpoint_number)
            prefix = commit.prefix_for(number)
            self.checkpoint.write(str(prefix), options=self.options)
            self.checkpoint.sync()  # an asynchronous write (the options ask for one) is complete
            bundle = open_bundle(prefix)
            if bundle.object_graph is None:
                raise AdapterError(f"{prefix}: TensorFlow wrote a bundle without an object graph")
            match = match_graph(self.checkpoint, bundle.object_graph, bundle.entries)
            manifest = build_manifest(bundle, match, self._saved_state(batch_in_epoch), self.spec)
            if self.export_program:
                manifest = self._with_exported_keras(manifest, match, prefix)
            manifest = ledger_for(self).stamp(manifest, prefix)
            commit.write_manifest(manifest, self.signing_key)
            commit.commit(self.max_to_keep)
            ledger_for(self).saved(prefix, manifest)
        return prefix

    def _with_exported_keras(self, manifest: Manifest, match: GraphMatch, prefix: Path) -> Manifest:
        weights = keras_weight_map(self.model, match, prefix)
        export_keras(self.model, prefix)
        inventory = manifest.components.model.model_copy(update={"keras_weights": weights})
        return manifest.model_copy(update={"components": manifest.components.model_copy(update={"model": inventory})})

    def _saved_state(self, batch_in_epoch: int | None) -> SavedState:
        return SavedState(
            model=self.model,
            optimizer=self.optimizer,
            generators=self.generators,
            global_states=self._global_states,
            iterator=self.iterator,
            step=self.step,
            epoch=self.epoch,
            batch_in_epoch=batch_in_epoch,
            fingerprint_inputs=list(self._fingerprint.inputs),
            fingerprint_outputs=list(self._fingerprint.outputs),
        )

    def _prepare_variables(self) -> None:
        """Create and track every variable now, so that saving and restoring see the same objects."""
        if not self.model.built:
            raise AdapterError(
                "the model has no weights yet: build it (call it on a batch, or give it an Input) before "
                "saving or restoring"
            )
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(self.model.trainable_variables)
        if not self._keras_variables_tracked:
            self._track_keras_variables()
            self._keras_variables_tracked = True

    def _track_keras_variables(self) -> None:
        untracked = untracked_variables(self.model, list(self.model.variables))
        if not untracked:
            return
        names = variable_names(describe_layers(self.model))
        # '.' and '/' would be escaped in bundle keys ('..', '.S'); '-' keeps the keys readable.
        tracked = {names[id(variable)].replace(".", "-"): variable for variable in untracked}
        setattr(self.checkpoint, _KERAS_VARIABLES, tracked)

    def _try_fingerprint_batch(self) -> None:
        """A batch the model cannot take fails here, not at the first save. Only a built model is called:
        building one here would draw its initial weights in another order than the run would."""
        if self._fingerprint_batch is None or not self.model.built:
            return
        try:
            self.model(self._fingerprint_batch, training=False)
        except Exception as exc:  # the model's own call: any error it raises means the batch does not fit
            raise AdapterError(
                f"CheckpointManager(fingerprint_batch=...): the model cannot take the batch: {type(exc).__name__}: {exc}"
            ) from exc

    def _record_fingerprint(self) -> None:
        if self._fingerprint_batch is None:
            return
        inputs = [tf.convert_to_tensor(tensor) for tensor in tf.nest.flatten(self._fingerprint_batch)]
        outputs = tf.nest.flatten(self.model(tf.nest.pack_sequence_as(self._fingerprint_batch, inputs), training=False))
        if not self._fingerprint.inputs:
            self._fingerprint.inputs = [tf.Variable(tensor, trainable=False) for tensor in inputs]
            self._fingerprint.outputs = [tf.Variable(tensor, trainable=False) for tensor in outputs]
            return
        for variable, tensor in zip(self._fingerprint.outputs, outputs):
            variable.assign(tensor)

    def _record_global_generators(self) -> None:
        for name, variable in self._global_states.items():
            variable.assign(capture_state(name))

    def restore(
        self, checkpoint: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, JSONValue] | None = None, fork: bool = False
    ) -> RestoreReport:
        """Restore a bundle (the latest when not given) and check it against its manifest and the spec.

        The spec is the manager's, else the one the checkpoint was saved against, else "everything the
        checkpoint holds" (the same rule as `ckptspec.torch.restore`).

        Args:
            checkpoint (`str | os.PathLike`, *optional*): a bundle prefix, e.g. `directory/ckpt-3`.
            overrides (`Mapping[str, JSONValue]`, *optional*): optimizer settings to change on purpose, e.g.
                `{"learning_rate": 1e-3}` (or the spec's name, `lr`); applied after loading, allowed only for
                the spec's `components.optimizer.overridable`, and reported with the saved value.
            fork (`bool`, *optional*): training from here is a new run (a fine-tune): the next save
                begins a run of its own from this bundle. Without it, the next save continues the
                bundle's run and names it as its parent (the manifest's `lineage`).

        Raises:
            `AdapterError` for an override of a setting the optimizer lacks, one the spec does not allow,
            or any override without an optimizer. `RestoreError` naming each layer constant, optimizer
            setting, schedule, generator, iterator, counter, unconsumed value, unmatched variable or
            fingerprint output that differs from what was saved.
        """
        prefix = self._resolve(checkpoint)
        manifest = manifest_to_check(prefix, self.directory)
        spec = effective_spec(self.spec, manifest)
        requested = checked_overrides(str(prefix), overrides, spec, self._optimizer_settings())
        notes = check_before_loading(prefix, manifest, spec, requested, manager_spec=self.spec, model=self.model, optimizer=self.optimizer)
        self._prepare_variables()
        rate_built_with = constant_learning_rate(self.optimizer)
        match = load_bundle(self.checkpoint, prefix)
        left_fresh, ignored = check_consumed(
            prefix, manifest, match, spec, self._own_keys(manifest), self._optional_paths(manifest)
        )
        check_generators(prefix, manifest, match, list(self.generators.values()))
        restore_global_generators(prefix, manifest, self._global_states)
        check_counters(prefix, manifest, self.step, self.epoch)
        fingerprint = replay_fingerprint(prefix, manifest, self.model, self._fingerprint_batch, spec)
        changes = apply_overrides(prefix, self.optimizer, rate_built_with, requested, manifest)
        ledger = ledger_for(self)
        ledger.resumed(prefix, manifest_choice(prefix).path, manifest, fork=fork)
        report = restore_report(prefix, manifest, match, left_fresh, ignored, changes, fingerprint, notes)
        # What the checks above read back from the live variables once the bundle was loaded.
        measured = [name for name in report.restored if name in ("model", "optimizer", "rng")]
        ledger.attested([*measured, *(["fingerprint"] if fingerprint is not None else [])])
        return report

    def _optimizer_settings(self) -> set[str] | None:
        return set(optimizer_hyperparameters(self.optimizer)) if self.optimizer is not None else None

    def _resolve(self, checkpoint: str | Path | None) -> Path:
        if checkpoint is not None:
            return Path(checkpoint)
        latest = self.latest_checkpoint
        if latest is None:
            raise RestoreError(f"{self.directory}: no checkpoint to restore (the directory has no `checkpoint` file)")
        return latest

    def _own_keys(self, manifest: Manifest) -> set[str]:
        """The fingerprint is replayed from the bundle itself, so a program without one may leave it unloaded."""
        record = manifest.components.fingerprint
        return {digest.name for digest in [*record.inputs, *record.outputs]} if record else set()

    def _optional_paths(self, manifest: Manifest) -> set[str]:
        """A global generator the checkpoint did not save keeps its state; a spec requiring it was checked before."""
        rng = manifest.components.rng
        recorded = {generator.name for generator in rng.generators} if rng else set()
        return {f"{_GLOBAL_STATES}/{name}" for name in self.global_generators if name not in recorded}


class CheckpointCallback(keras.callbacks.Callback):
    """Saves through a `CheckpointManager` during `model.fit`, every N epochs and/or every N steps.

    The manager's `epoch` counts completed epochs, so after `report = manager.restore()` a run resumes
    with `model.fit(..., initial_epoch=report.data_position["epoch"])`.

    Args:
        manager (`CheckpointManager`): built over the model being fitted and its optimizer.
        every_n_epochs (`int`, *optional*, defaults to 1): save after every N-th epoch; None for never.
        every_n_steps (`int`, *optional*): also save after every N-th optimizer step.
    """

    def __init__(
        self, manager: CheckpointManager, *, every_n_epochs: int | None = 1, every_n_steps: int | None = None
    ) -> None:
        super().__init__()
        self.manager = manager
        self.every_n_epochs = every_n_epochs
        self.every_n_steps = every_n_steps

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.manager.epoch.assign(epoch)

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self.every_n_steps and int(self.manager.step.numpy()) % self.every_n_steps == 0:
            self.manager.save(batch_in_epoch=batch + 1)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.manager.epoch.assign(epoch + 1)
        if self.every_n_epochs and (epoch + 1) % self.every_n_epochs == 0:
            self.manager.save()
