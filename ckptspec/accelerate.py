"""Accelerate integration: `ckptspec.accelerate.track(accelerator, spec=...)`.

Every `accelerator.save_state(directory)` then writes `<directory>.ckptspec.yaml` beside the
directory once Accelerate has written its files, and every `accelerator.load_state(directory)` first
validates the directory against that manifest (a damaged file is named, down to the tensor) and
afterwards checks that the optimizers and schedulers came back with the steps they were saved at.
Accelerate saves no data position and takes no fingerprint batch here: a spec for it leaves
`data_position` and `fingerprint` optional.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from ._documents import load_manifest, save_document
from ._sidecars import MANIFEST_SUFFIX, manifest_path_for
from ._exceptions import RestoreError
from ._models import Spec
from .adapters._spec import as_spec

__all__ = ["track"]


def track(accelerator: Any, *, spec: Spec | str | os.PathLike[str] | None = None) -> Any:
    """Record a manifest at each `save_state` of `accelerator` and check each `load_state` against it.

    Returns the two hook handles (`handle.remove()` stops the checks; the manifests already written stay)."""
    tracker = _Tracker(accelerator, as_spec(spec))
    handles = (
        accelerator.register_save_state_pre_hook(tracker.before_save),
        accelerator.register_load_state_pre_hook(tracker.before_load),
    )
    # The hooks run before Accelerate writes or loads anything; what comes after is seen by wrapping
    # this accelerator's own two methods (its class is left alone).
    accelerator.save_state = functools.wraps(accelerator.save_state)(tracker.save_state(accelerator.save_state))
    accelerator.load_state = functools.wraps(accelerator.load_state)(tracker.load_state(accelerator.load_state))
    return handles


class _Tracker:
    def __init__(self, accelerator: Any, spec: Spec | None) -> None:
        self.accelerator = accelerator
        self.spec = spec
        self._saving: Path | None = None
        self._loading: Path | None = None

    def before_save(self, models: Any, weights: Any, output_dir: str) -> None:
        self._saving = Path(output_dir)

    def save_state(self, save: Any) -> Any:
        def saved(*args: Any, **kwargs: Any) -> Any:
            location = save(*args, **kwargs)
            directory, self._saving = self._saving, None
            if directory is not None and self.accelerator.num_processes > 1:
                self.accelerator.wait_for_everyone()  # every process writes its own random_states_{i}.pkl
            if directory is not None and self.accelerator.is_main_process:
                self._write_manifest(directory)
            return location

        return saved

    def _write_manifest(self, directory: Path) -> None:
        from .adopt import build_manifest

        save_document(build_manifest(directory, self.spec), manifest_path_for(directory))
        _remove_orphaned_manifests(directory.parent)

    def before_load(self, models: Any, input_dir: str) -> None:
        """Refuse a directory whose files no longer match the manifest written when it was saved."""
        from ._validate import validate

        directory = Path(input_dir)
        manifest = manifest_path_for(directory)
        if not manifest.exists():
            raise RestoreError(f"{directory}: no manifest {manifest.name} beside it: it was not saved under ckptspec.accelerate.track")
        result = validate(directory, spec=self.spec)
        errors = [finding for finding in result.findings if finding.severity == "error"]
        if errors:
            listed = "\n".join(f"  - {finding.code} {Path(finding.file).name if finding.file else directory.name}: {finding.message}" for finding in errors)
            raise RestoreError(f"{directory}: not loaded, its files do not match its manifest:\n{listed}")
        self._loading = directory

    def load_state(self, load: Any) -> Any:
        def loaded(*args: Any, **kwargs: Any) -> Any:
            result = load(*args, **kwargs)
            directory, self._loading = self._loading, None
            if directory is not None:
                self._check_restored(directory)
            return result

        return loaded

    def _check_restored(self, directory: Path) -> None:
        """The schedulers stand at the steps their files hold (Accelerate loads what is registered)."""
        manifest = load_manifest(manifest_path_for(directory))
        problems = []
        for record, scheduler in zip(manifest.components.scheduler or [], self.accelerator._schedulers):
            step = getattr(scheduler, "scheduler", scheduler).last_epoch
            if step != record.step:
                problems.append(f"{record.at.lstrip('/')}.bin: the scheduler stands at step {step}, saved at {record.step}")
        if problems:
            raise RestoreError(f"{directory}: the load did not restore what was saved:\n" + "\n".join(f"  - {line}" for line in problems))


def _remove_orphaned_manifests(parent: Path) -> None:
    """Manifests of `save_state` directories that Accelerate's `total_limit` has deleted since."""
    for manifest in parent.glob(f"checkpoint_*{MANIFEST_SUFFIX}"):
        if not manifest.with_name(manifest.name[: -len(MANIFEST_SUFFIX)]).exists():
            manifest.unlink(missing_ok=True)
