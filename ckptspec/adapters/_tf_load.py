"""The steps of a TensorFlow restore around its checks (`ckptspec.adapters._tf_restore`): the
manifest that describes the bundle (or why there is none), the load of the bundle into the tracked
objects, the optimizer settings overridden once it is loaded, and the report of what was restored."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import keras
import tensorflow as tf

from .._commit import manifest_choice
from .._documents import load_manifest
from .._exceptions import DocumentError, RestoreError, RestoreNote
from .._models import Manifest
from .._models.common import JSONValue
from ..formats.tfbundle import open_bundle
from ._report import FingerprintReplay, HyperparameterChange, RestoreReport, report_notes, restored_components
from ._spec import COMPONENTS
from ._tf_commit import kept_bundles
from ._tf_config import learning_rate_value, schedule_config
from ._tf_graph import GraphMatch, match_graph
from ._tf_restore import check_learning_rate

__all__ = [
    "apply_overrides",
    "constant_learning_rate",
    "load_bundle",
    "manifest_to_check",
    "restore_report",
]


def manifest_to_check(prefix: Path, directory: Path) -> Manifest:
    """The manifest that describes the bundle (an interrupted save's pending record, with a
    `RestoreNote`, where that is the one); a refusal that says why there is none. `directory` is the
    manager's, whose state file says whether the bundle is still kept."""
    choice = manifest_choice(prefix)
    if choice.interrupted is not None and choice.path == choice.pending:
        warnings.warn(f"{prefix}: {choice.interrupted}", RestoreNote, stacklevel=3)
    if not choice.path.is_file():
        raise RestoreError(f"{prefix}: cannot check the restore: {_why_no_manifest(prefix, choice.path, directory)}")
    try:
        return load_manifest(choice.path)
    except DocumentError as exc:
        raise RestoreError(f"{prefix}: cannot check the restore: its manifest cannot be read ({exc})") from exc


def _why_no_manifest(prefix: Path, manifest: Path, directory: Path) -> str:
    if not Path(f"{prefix}.index").is_file():
        return f"there is no bundle {prefix.name} ({prefix.name}.index does not exist)"
    missing = f"there is no manifest {manifest.name} beside it"
    kept = kept_bundles(prefix.parent) if prefix.parent == directory else None
    if kept is not None and kept.latest is not None and prefix != kept.latest and prefix not in kept.prefixes:
        return (
            f"{missing}, and the state file no longer lists it: a save or a removal of it was interrupted "
            f"before it was named or after it was let go (the latest bundle is {kept.latest})"
        )
    return (
        f"{missing}; this manager writes a bundle's manifest before the state file names the bundle, so it was "
        f"written without ckptspec, or its manifest was deleted since (`ckptspec manifest {prefix}` adopts it)"
    )


def load_bundle(checkpoint: tf.train.Checkpoint, prefix: Path) -> GraphMatch:
    """Restores the bundle into the tracked objects; which saved values went where."""
    status = checkpoint.restore(str(prefix))
    # Consumption is checked afterwards, by name; TensorFlow's own warnings would only repeat it.
    status.expect_partial()
    bundle = open_bundle(prefix)
    if bundle.object_graph is None:
        raise RestoreError(f"{prefix}: the bundle has no object graph: it was not written by tf.train.Checkpoint")
    return match_graph(checkpoint, bundle.object_graph, bundle.entries)


def constant_learning_rate(optimizer: keras.optimizers.Optimizer | None) -> float | None:
    """The learning rate an optimizer without a schedule was built with, read before the load replaces it."""
    if optimizer is None or schedule_config(optimizer) is not None:
        return None
    return learning_rate_value(optimizer)


def apply_overrides(
    prefix: Path,
    optimizer: keras.optimizers.Optimizer | None,
    rate_built_with: float | None,
    requested: Mapping[str, JSONValue],
    manifest: Manifest,
) -> tuple[HyperparameterChange, ...]:
    if optimizer is None:
        return ()
    applied = []
    if rate_built_with is not None:
        override = check_learning_rate(prefix, rate_built_with, learning_rate_value(optimizer), requested)
        if override is not None:
            optimizer.learning_rate = override.applied
            applied.append(override)
    records = manifest.components.optimizer
    saved = records[0].param_groups[0].hyperparameters if records else {}
    for name, value in requested.items():
        if name != "learning_rate":
            applied.append(HyperparameterChange(name, saved.get(name), value))
            setattr(optimizer, name, value)
    return tuple(applied)


def restore_report(
    prefix: Path,
    manifest: Manifest,
    match: GraphMatch,
    left_fresh: tuple[str, ...],
    ignored: tuple[str, ...],
    changes: tuple[HyperparameterChange, ...],
    fingerprint: FingerprintReplay | None,
    notes: list[str],
) -> RestoreReport:
    components = manifest.components
    tensors = components.model.tensors
    unconsumed = set(match.unconsumed)
    # Every check passed, so each saved component was loaded into something given for it.
    restored, not_restored = restored_components(manifest, {name: True for name in COMPONENTS})
    position = components.data_position
    return RestoreReport(
        checkpoint=prefix,
        restored=restored,
        not_restored=not_restored,
        tensors_saved=len(tensors),
        tensors_loaded=sum(1 for entry in tensors if entry.name not in unconsumed),
        left_fresh=left_fresh,
        ignored=ignored,
        generators=tuple(generator.name for generator in components.rng.generators) if components.rng else (),
        changes=changes,
        data_position=position.model_dump(include={"epoch", "global_step", "batch_in_epoch"}) if position else {},
        fingerprint=fingerprint,
        notes=report_notes(prefix, notes),
    )
