"""Adopt a checkpoint that has no manifest: record everything readable without the model's code.

What the files cannot say (construction constants, class names of optimizer and scheduler, RNG state
Lightning never saves, a fingerprint) is listed in the manifest's `unknown:`, so a spec that requires
it fails validation with a reason instead of passing on a guess.
"""

from __future__ import annotations

from pathlib import Path

from ._storage import location
from ._discover import locate_checkpoint
from ._sidecars import manifest_path_for
from ._adopt_hf import TrainingManifest
from ._exceptions import CkptspecError, ReaderError, UnsupportedFormatError, WriteError
from ._manifests import DeepSpeedManifest, KerasManifest, KnownDigests, ManifestBuilder, TFManifest, TorchManifest
from ._models import Manifest, Spec
from ._records import write_manifest
from .checks import Context, Finding
from ._views.base import CheckpointView
from ._views.open import open_view
from .checks.tensors import reader_problems
from .checks.safety import unreadable_finding
from .checks.pickles import pickle_dangers
from .formats._io import unreadable
from .formats._names import DetectedCheckpoint

__all__ = ["AdoptionRefused", "KnownDigests", "adopt", "adopted_manifest", "build_manifest"]


_BUILDERS: dict[str, type[ManifestBuilder]] = {
    "tf-bundle": TFManifest,
    "keras": KerasManifest,
    "deepspeed": DeepSpeedManifest,
    "hf-trainer": TrainingManifest,
    "accelerate": TrainingManifest,
}
"""The manifest builder of each view format other than torch's and Lightning's (`TorchManifest`)."""


class AdoptionRefused(CkptspecError):
    """The checkpoint is damaged, or its pickle can run code: a manifest would record it as sound."""

    def __init__(self, checkpoint: Path, findings: list[Finding]) -> None:
        self.checkpoint = checkpoint
        self.findings = findings
        listed = "".join(f"\n  {finding.code} {finding.name}: {finding.message}" for finding in findings)
        super().__init__(f"{checkpoint}: not adopted, no manifest written:{listed}")


def adopt(path: str | Path, spec: Spec | None = None, *, force: bool = False) -> Path:
    """Write the manifest for the checkpoint at `path`; returns the manifest's path.

    Refuses (`WriteError`) to replace an existing manifest unless `force`: an adapter's manifest
    records more than adoption can. Refuses (`AdoptionRefused`) a checkpoint whose reader finds
    damage or whose pickle names a global off the allow-list that `spec` (the operator's) does not
    allow by its exact name, writing nothing.
    """
    found = locate_checkpoint(location(path))
    target = manifest_path_for(found.path)
    if target.exists() and not force:
        raise WriteError(f"{target}: exists; pass --force to replace it with an adopted manifest")
    with _open_sound(found, spec) as view:
        manifest = _record(view, spec)
    return write_manifest(manifest, found.path)


def adopted_manifest(path: str | Path, spec: Spec | None = None) -> Manifest:
    """The manifest `adopt` would write for the checkpoint at `path`, refusing what it refuses, without writing it."""
    with _open_sound(locate_checkpoint(location(path)), spec) as view:
        return _record(view, spec, root_counters=True)


def build_manifest(
    path: str | Path | DetectedCheckpoint, spec: Spec | None = None, *, known: KnownDigests | None = None
) -> Manifest:
    """The manifest adoption would write for the checkpoint at `path` (or what `detect` found
    there, which is not sniffed again), without writing it (and without refusing damage:
    `ckptspec diff` shows what changed in a damaged copy)."""
    known = known or KnownDigests()
    found = path if isinstance(path, DetectedCheckpoint) else location(path)
    with open_view(found, trusted_tensors=known.tensors.keys(), verify_slices=False, known_save=known.dcp) as view:
        return _record(view, spec, known)


def _open_sound(found: DetectedCheckpoint, spec: Spec | None) -> CheckpointView:
    """The view of the checkpoint `found`, or `AdoptionRefused` listing what makes it unfit to adopt."""
    path = found.path
    try:
        view = open_view(found)
    except UnsupportedFormatError:
        raise
    except ReaderError as exc:
        named = pickle_dangers(Context(path, None, None, spec, None), exc.globals, path)
        raise AdoptionRefused(path, [unreadable_finding(exc, str(path), str(path)), *named]) from None
    ctx = Context(path, None, None, spec, view)
    found = [*reader_problems(ctx, view), *pickle_dangers(ctx, view.globals, view.path)]
    unfit = [finding for finding in found if finding.severity != "info"]
    if unfit:
        view.close()
        raise AdoptionRefused(path, unfit)
    return view


def _record(view: CheckpointView, spec: Spec | None, known: KnownDigests | None = None, *, root_counters: bool = False) -> Manifest:
    """`root_counters`: also take a plain dict's top-level `epoch` and `step` as its data position
    (what `ckptspec lineage` orders a run by; an adopted manifest leaves them out, so that a restore
    is not asked for a data position the script never kept as one)."""
    if view.format in ("pickle", "archive"):
        what = "a bare pickle" if view.format == "pickle" else "a container of pickles"
        raise UnsupportedFormatError(f"{view.path}: {what}, not a checkpoint: it has no manifest to write or compare")
    builder = _BUILDERS.get(view.format, TorchManifest)(view, spec, known or KnownDigests())
    builder.root_counters = root_counters
    try:
        return builder.manifest()
    except OSError as exc:
        raise unreadable(exc.filename, exc) from None


