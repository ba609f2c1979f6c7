"""PyTorch Lightning: manifests for every checkpoint a Trainer writes, and enforcement on resume.

    from ckptspec.lightning import CkptspecCallback

    trainer = Trainer(callbacks=[ModelCheckpoint(...), CkptspecCallback(spec="ckptspec.yaml",
                                                                        fingerprint_batch=fixed_batch)])
    trainer.fit(model, data)                      # a manifest beside every .ckpt
    trainer.fit(model, data, ckpt_path="...")      # RestoreError before training if anything differs

The callback adds what Lightning checkpoints lack (random generator states, the data position and
the fingerprint) under `callbacks/CkptspecCallback`, wraps the strategy's CheckpointIO so a
manifest is written after each checkpoint file and removed with it, and mirrors ModelCheckpoint's
`last.ckpt` links. Works with `lightning.pytorch` and `pytorch_lightning`: the callback subclasses the
`Callback` of each namespace installed, so either namespace's Trainer accepts it whatever the import order.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._documents import load_manifest
from ._sidecars import manifest_path_for
from ._exceptions import AdapterError, RestoreError, RestoreNote
from ._models import (
    UNKNOWN,
    DataPositionRule,
    FileEntry,
    Manifest,
    ManifestComponents,
    RanksRecord,
    Requirement,
    Retention,
    Spec,
)
from ._records import now_iso, producer, spec_ref
from .adopt import build_manifest
from .adapters._lightning_saves import NAMESPACES, mirror_last_links, wrap_checkpoint_io, wrap_strategy_saves
from .adapters._lightning_manifest import directory_components, own_records, saved_components

import torch  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from .adapters._overrides import checked_overrides  # noqa: E402
from .adapters._report import FingerprintReplay, HyperparameterChange, RestoreReport, report_notes, restored_components
from .adapters._lineage import ledger_for  # noqa: E402
from .adapters._sidecars import write_sidecars  # noqa: E402
from .lineage._state import inventory_digest  # noqa: E402
from .adapters._spec import as_spec, effective_spec, find_manifest, has_manifest, raise_if_unmet, requirement, unmet_components  # noqa: E402
from .adapters._torch_config import config_differences, hyperparameter_notes, module_configs, qualified_name  # noqa: E402
from .adapters._torch_enforce import (  # noqa: E402
    apply_overrides,
    check_model_tensors,
    component_differences,
    dropped_notes,
    optimizer_differences,
    optimizer_settings,
    raise_if_problems,
    restored_state_differences,
    unrecorded_notes,
)
from .adapters._torch_records import parameter_names, tensor_inventory  # noqa: E402
from .adapters._torch_replay import (  # noqa: E402
    capture_fingerprint,
    capture_fingerprint_for,
    capture_rng,
    check_fingerprint,
    restore_rng,
)
from .adapters._next_batches import BatchDrawn, BatchesDrawn, DataOrderCheck, LoaderShape, Recorder, data_order_check, judged_together, trained_on  # noqa: E402
from .adapters._torch_loader import batch_crc32c  # noqa: E402
from .adapters._lightning_state import (  # noqa: E402
    AsSaved,
    Resume,
    data_position,
    foreign_generators,
    gathered,
    hyperparameters,
    lightning_version,
    model_chunks,
    samples,
)


__all__ = ["CkptspecCallback", "FingerprintReplay", "HyperparameterChange", "RestoreNote", "RestoreReport"]


class CkptspecCallback(*(namespace.Callback for namespace in NAMESPACES)):  # type: ignore[misc]
    """Records a manifest beside every checkpoint and checks `Trainer.fit(ckpt_path=...)` against it.

    Args:
        spec: the spec (or its YAML path) checkpoints are written and checked against; on resume
            it defaults to the spec embedded in the checkpoint's manifest.
        fingerprint_batch: a fixed batch (tensor, tuple or dict of tensors) passed to the
            LightningModule's `forward` in eval mode at each save; its outputs are stored and
            replayed on resume.
        overrides: optimizer hyperparameters to change on resume (e.g. `{"lr": 1e-3}`, or Keras's name
            `learning_rate`), applied after Lightning has loaded the saved ones and limited to the spec's
            `components.optimizer.overridable`; `last_report.changes` shows both values.
        export_program: also write `<checkpoint>.pt2` at each save, the LightningModule exported by
            `torch.export` on `fingerprint_batch`, for `ckptspec validate --replay` at intake.
        signing_key: sign each checkpoint, its manifest and program with this private key (PEM);
            defaults to the `CKPTSPEC_SIGNING_KEY` environment variable when that is set.
        allow_resharding: resume a checkpoint saved by another number of processes (DDP ranks);
            the random generators are then not restored, since no saved rank's are this rank's.
            Refused by default.
        fork: the fit resumed from `ckpt_path` begins a new run (a fine-tune): its saves get a new
            run id and name the checkpoint as the fork's parent (the manifests' `lineage`).

    Under a multi-process strategy every rank's generators and data position are saved, and on
    resume each rank gets back the ones it saved.

    After a resume, `last_report` holds the `RestoreReport`. An instance of the `Callback` of every
    Lightning namespace installed (`lightning.pytorch`, `pytorch_lightning`), so that either Trainer
    accepts it.
    """

    def __init__(
        self,
        *,
        spec: Spec | str | os.PathLike[str] | None = None,
        fingerprint_batch: Any = None,
        overrides: Mapping[str, Any] | None = None,
        export_program: bool = False,
        signing_key: str | os.PathLike[str] | None = None,
        allow_resharding: bool = False,
        fork: bool = False,
    ) -> None:
        if export_program and fingerprint_batch is None:
            raise AdapterError("CkptspecCallback: export_program needs fingerprint_batch (it is the exported program's example input)")
        self.spec = as_spec(spec)
        self.fingerprint_batch = fingerprint_batch
        self.export_program = export_program
        self.signing_key = signing_key
        self.overrides = dict(overrides or {})
        self.allow_resharding = allow_resharding
        self.last_report: RestoreReport | None = None
        self._trainer: Any = None
        self._module: torch.nn.Module | None = None
        self._resume: Resume | None = None
        self._fit_started = False
        self.fork = fork
        self._start_state: str | None = None
        self._next_batches = Recorder()
        """The saves still waiting for the batches drawn after them (next-batch identity)."""
        self._data_order: DataOrderCheck | None = None
        """The resume's first batches against those the run drew after the save, until decided."""
        self._attest: Resume | None = None
        self._agreeing = False
        """Whether the ranks still share their verdicts on the batches after a resume."""
        """The resume whose restored training state is measured at the first batch."""

    # --- saving -------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.spec is not None:
            # Only what the callback itself saves is known here; the optimizers come later, from configure_optimizers.
            present = {"data_position": True, "fingerprint": self.fingerprint_batch is not None}
            problems = unmet_components(self.spec, present, given_as={"fingerprint": "fingerprint_batch"})
            raise_if_unmet(self.spec, problems, by="CkptspecCallback")
        if self.fingerprint_batch is not None:
            # Tried once here, as every save will run it, so a batch the model cannot take fails before training.
            capture_fingerprint_for("CkptspecCallback", pl_module, self.fingerprint_batch)
        self._trainer, self._module = trainer, pl_module
        wrap_checkpoint_io(trainer.strategy, self)
        wrap_strategy_saves(trainer.strategy, self)
        for callback in trainer.checkpoint_callbacks:
            mirror_last_links(callback)

    def state_dict(self) -> dict[str, Any]:
        if self._trainer is None or self._module is None:
            return {}
        state: dict[str, Any] = {"data_position": data_position(self._trainer)}
        if self.spec is None or requirement(self.spec, "rng") is not Requirement.forbidden:
            state["rng"] = capture_rng()
        if self._trainer.world_size > 1:
            # Every rank calls state_dict for each save; only rank 0's copy is written.
            state["ranks"] = gathered({key: state[key] for key in ("data_position", "rng") if key in state}, self._trainer.world_size)
        if self.fingerprint_batch is not None:
            state["fingerprint"] = capture_fingerprint(self._module, self.fingerprint_batch)
        return state

    def write_sidecars(self, checkpoint: Mapping[str, Any], path: Path) -> None:
        """The exported program and the signature, after the manifest (see `ckptspec.torch.save`)."""
        fingerprint = checkpoint.get("callbacks", {}).get(self.state_key, {}).get("fingerprint")
        write_sidecars(path, model=self._module, fingerprint=fingerprint, export=self.export_program, signing_key=self.signing_key)

    def expect_next_batches(self, path: Path) -> None:
        """After a save at `path`, on every rank: the batches this rank trains on next are digested
        and written beside the checkpoint once there are `next_batches` of them. Rank 0 wrote the
        manifest; the others learn its digest from it."""
        trainer = self._trainer
        wanted = (self.spec.components.data_position if self.spec is not None else DataPositionRule()).next_batches
        manifest_sha256 = None
        if trainer.is_global_zero and wanted > 0 and "://" not in str(path):
            with contextlib.suppress(OSError):  # no manifest (a strategy's own save failed): nothing to describe
                manifest_sha256 = hashlib.sha256(manifest_path_for(path).read_bytes()).hexdigest()
        manifest_sha256 = trainer.strategy.broadcast(manifest_sha256)
        if manifest_sha256 is not None:
            # Lightning's loop never draws batches again to skip them, so the record's first batch is the resumed run's first.
            shape = LoaderShape(samples=samples(trainer), drawn_in_epoch=0)
            self._next_batches.expect(BatchesDrawn(path, manifest_sha256, trainer.global_rank, shape, wanted))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """The batch about to be trained on: checked against the run's after a resume, recorded after
        a save. Under several processes every rank learns the others' verdicts until no check is
        pending, so that all raise together."""
        if not self._agreeing:
            self._judge(trainer, batch)
            return
        judge = functools.partial(self._judge, trainer, batch)
        self._agreeing = judged_together(judge, lambda: self._data_order, lambda verdict: gathered(verdict, trainer.world_size))

    def _judge(self, trainer: Any, batch: Any) -> None:
        if self._attest is not None:
            resume, self._attest = self._attest, None
            self._attest_restored(trainer, resume)
        if self._data_order is None and not self._next_batches.waiting:
            return
        check, self._data_order = self._data_order, None
        self._data_order = trained_on(check, self._next_batches, BatchDrawn(batch_crc32c(batch)))

    def _attest_restored(self, trainer: Any, resume: Resume) -> None:
        """After every hook of the restore (a module's `on_load_checkpoint` or `on_train_start` can
        undo it), before the first optimizer step: the live optimizers, schedulers and scaler
        against the state the manifest recorded."""
        report = self.last_report
        restored = report.restored if report is not None else ()
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        raise_if_problems(str(resume.path), restored_state_differences(resume.manifest, restored, trainer.optimizers, schedulers, scaler))
        measured = [name for name in restored if name in ("model", "optimizer", "scheduler", "scaler")]
        fingerprint = ["fingerprint"] if report is not None and report.fingerprint is not None else []
        ledger_for(self._module).attested([*measured, *fingerprint], report.data_order if report is not None else None)

    def describe(self, path: Path, files: list[FileEntry], components: ManifestComponents, unknown: list[str]) -> Manifest:
        """The manifest of the checkpoint this trainer wrote to `path` (`files`), holding `components`."""
        manifest = Manifest(
            format="lightning",
            checkpoint=path.name,
            created=now_iso(),
            producer=producer({"torch": torch.__version__, **lightning_version(self._trainer)}),
            spec=spec_ref(self.spec) if self.spec is not None else None,
            files=files,
            components=components,
            unknown=unknown,
        )
        return ledger_for(self._module).stamp(manifest, path, start_sha256=self._start_state, retention=_retention(self._trainer, path))

    def components(self, checkpoint: Mapping[str, Any], written_crc32c: Mapping[tuple[int, int], str] | None = None) -> ManifestComponents:
        """What `checkpoint` holds, as its manifest records it; the tensors take the CRC32Cs of
        their storages taken as the file was written (`written_crc32c`), where there are some."""
        return saved_components(self._trainer, self._module, self.spec, checkpoint, own_records(self.spec, self.state_key, checkpoint), written_crc32c)

    def directory_manifest(self, path: Path, checkpoint: Mapping[str, Any]) -> Manifest:
        """The manifest of the sharded directory a strategy saved at `path` (`checkpoint` without the
        state the strategy split into the shards): the files as adoption reads them back, every chunk
        checksummed, with what only the callback knows (construction constants, generators, data
        position, every rank's state, the fingerprint)."""
        read = build_manifest(path, self.spec)
        own = {key: value for key, value in own_records(self.spec, self.state_key, checkpoint).items() if value is not None}
        components, unknown = directory_components(read, self._trainer, self._module, own)
        # A strategy's own layout (DeepSpeed's) keeps the format the reader found.
        return self.describe(path, read.files, components, unknown).model_copy(update={"format": read.format})

    # --- resuming: model once loaded; optimizers before and after Lightning loads them; then RNG ---

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if trainer.ckpt_path is None:
            return
        path = Path(trainer.ckpt_path)
        if trainer.state.fn != "fit" and not has_manifest(path):
            # validate/test/predict only read the weights: an old checkpoint without a manifest may be evaluated.
            self.last_report = None
            report_notes(path, ["no manifest beside it: loaded for evaluation without checks"])
            return
        manifest = load_manifest(find_manifest(path))
        if manifest.components.model is None:
            raise RestoreError(f"{path}: its manifest records no model state dict, so the weights cannot be checked")
        spec = effective_spec(self.spec, manifest)
        problems, notes = [], []
        if manifest.components.config is not None:
            current = module_configs(pl_module)
            found = config_differences(manifest.components.config.modules, current, spec.components.config.ignore, self.overrides)
            problems.extend(f"config: {line}" for line in found.problems)
            notes.extend(f"config: {line}" for line in found.notes)
            saved_hyperparameters = manifest.components.config.hyperparameters
            notes.extend(hyperparameter_notes(saved_hyperparameters, hyperparameters(pl_module.hparams), self.overrides))
        saved_state, live_state = checkpoint.get("state_dict"), pl_module.state_dict()
        if saved_state is None:  # a sharded directory: the strategy loaded the shards into the model itself
            saved_state, live_state = {}, AsSaved(live_state, model_chunks(path))
        model_check = check_model_tensors(manifest.components.model.tensors, saved_state, live_state, spec.components.model)
        problems.extend(model_check.problems)
        ours = checkpoint.get("callbacks", {}).get(self.state_key, {})
        own = self._own_rank_state(ours, trainer, manifest.components.ranks, problems, notes)
        fingerprint, lines = check_fingerprint(
            pl_module, ours.get("fingerprint"), spec.components.fingerprint, left_fresh=bool(model_check.left_fresh)
        )
        raise_if_problems(str(path), [*problems, *lines])
        saved_groups = [
            [{key: value for key, value in group.items() if key != "params"} for group in state["param_groups"]]
            for state in checkpoint.get("optimizer_states", [])
        ]
        self._resume = Resume(path, manifest, spec, saved_groups, model_check, fingerprint, own, notes)
        ledger_for(pl_module).resumed(path, find_manifest(path), manifest, fork=self.fork)
        if self._fit_started:
            # Strategies that load the checkpoint after setting up (ModelParallelStrategy) do so after on_fit_start.
            self._check_training_state(trainer, pl_module)

    def _own_rank_state(
        self, ours: Mapping[str, Any], trainer: Any, recorded: RanksRecord | None, problems: list[str], notes: list[str]
    ) -> dict[str, Any]:
        """What this rank saved (its generators and data position), checked against what the
        manifest `recorded` of every rank; nothing, with a problem or, under `allow_resharding`, a
        note, when another number of processes saved the checkpoint."""
        if not ours:
            return {}
        ranks = ours.get("ranks", [ours])
        if not isinstance(ranks, list) or not all(isinstance(rank, dict) for rank in ranks):
            problems.append(f"callbacks/{self.state_key}/ranks: not a list of each rank's saved state")
            return {}
        if recorded is not None:
            # Every rank checks every rank's state, so that all of them refuse the resume together.
            found = foreign_generators(recorded, ranks)
            problems.extend(found)
            if found:
                return {}
        if len(ranks) == trainer.world_size:
            return dict(ranks[trainer.global_rank])
        saved_by = f"saved with world size {len(ranks)}, resumed with {trainer.world_size}"
        if self.allow_resharding:
            notes.append(f"rng: {saved_by}: no saved rank's random generators were restored")
        else:
            problems.append(f"{saved_by}: each rank's random generators and data position belong to that rank; "
                            "pass allow_resharding=True to resume without them")  # fmt: skip
        return {}

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._fit_started = True
        if self._resume is None and trainer.ckpt_path is None and trainer.world_size == 1:  # where a run begun from loaded weights shows
            state = {name: value.full_tensor() if isinstance(value, DTensor) else value for name, value in pl_module.state_dict().items()}
            self._start_state = inventory_digest(tensor_inventory("/state_dict", state, {}, checksums=True))
        self._check_training_state(trainer, pl_module)

    def _check_training_state(self, trainer: Any, pl_module: Any) -> None:
        """Once both the checkpoint is read and the optimizers exist: the optimizers and the other
        components against the manifest, then this rank's generators restored."""
        if self._resume is None:
            return
        resume = self._resume
        resume.overrides = checked_overrides(str(resume.path), self.overrides, resume.spec, optimizer_settings(trainer.optimizers))
        resume.given = {
            "optimizer": bool(trainer.optimizers),
            "scheduler": bool(trainer.lr_scheduler_configs),
            "scaler": getattr(trainer.precision_plugin, "scaler", None) is not None,
            "ema": False,
            "rng": True,
            "data_position": True,  # Lightning restores its loops' progress itself
            "fingerprint": True,
        }
        problems = component_differences(resume.spec, resume.manifest, resume.given)
        problems.extend(self._optimizer_differences(trainer, pl_module, resume))
        raise_if_problems(str(resume.path), problems)
        # The fit loop draws from the generators when it creates the first data iterator, before
        # on_train_start; the sanity check in between runs under Lightning's own isolate_rng.
        resume.restored_rng = restore_rng(resume.own["rng"]) if "rng" in resume.own else []

    def _optimizer_differences(self, trainer: Any, pl_module: Any, resume: Resume) -> list[str]:
        records = resume.manifest.components.optimizer or []
        problems = []
        if trainer.optimizers and len(trainer.optimizers) != len(records):
            problems.append(f"optimizer: configure_optimizers returned {len(trainer.optimizers)}, the checkpoint holds {len(records)}")
        names = parameter_names(pl_module)
        for index, (optimizer, record, groups) in enumerate(zip(trainer.optimizers, records, resume.saved_groups)):
            problems.extend(optimizer_differences(index, record, groups, optimizer, names, resume.spec, resume.overrides))
        for index, (config, record) in enumerate(zip(trainer.lr_scheduler_configs, resume.manifest.components.scheduler or [])):
            if record.type != UNKNOWN and qualified_name(config.scheduler) != record.type:
                problems.append(f"scheduler {index} is a {qualified_name(config.scheduler)}, a {record.type} when saved")
        return problems

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._finish_resume(trainer, training=True)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        # A checkpoint at or past max_epochs resumes with nothing to train: on_train_start never runs.
        self._finish_resume(trainer, training=False)

    def _finish_resume(self, trainer: Any, *, training: bool) -> None:
        """Applies the overrides and sets `last_report`, once Lightning has restored the training state."""
        if self._resume is None or not self._resume.given:
            return
        resume, self._resume = self._resume, None
        changes = [change for index, optimizer in enumerate(trainer.optimizers) for change in apply_overrides(index, optimizer, resume.overrides)]
        check = resume.model_check
        restored, not_restored = restored_components(resume.manifest, {**resume.given, "rng": bool(resume.restored_rng)})
        notes = [*resume.notes, *unrecorded_notes(resume.manifest), *dropped_notes(not_restored)]
        data_order = self._watch_data_order(trainer, resume) if training else None
        self._attest = resume if training else None
        self._agreeing = training and trainer.world_size > 1
        if data_order is not None and data_order.status == "unchecked":
            notes.append(f"data order not checked: {data_order.reason}")
        self.last_report = RestoreReport(
            checkpoint=resume.path,
            restored=restored,
            not_restored=not_restored,
            tensors_saved=check.saved,
            tensors_loaded=check.loaded,
            left_fresh=check.left_fresh,
            ignored=check.ignored,
            generators=tuple(resume.restored_rng),
            changes=tuple(changes),
            data_position=dict(resume.own.get("data_position", {})),
            fingerprint=resume.fingerprint,
            notes=report_notes(resume.path, notes),
            data_order=data_order,
        )

    def _watch_data_order(self, trainer: Any, resume: Resume) -> DataOrderCheck | None:
        """The check of the first batches the resumed fit trains on (`RestoreError` now for a
        dataset of another length); None where the spec lets the data change or turns it off."""
        rule = resume.spec.components.data_position
        if rule.on_resume != "restore" or rule.next_batches == 0:
            return None
        ranks = resume.manifest.components.ranks
        saved_world = ranks.world_size if ranks is not None else 1
        if saved_world != trainer.world_size:  # allowed resharding: each rank's share of the data is another
            reason = f"saved by {saved_world} processes, resumed by {trainer.world_size}: each one draws another share of the data"
            return DataOrderCheck(resume.path, trainer.global_rank, "unchecked", reason)
        shape = LoaderShape(samples=samples(trainer), drawn_in_epoch=0)
        check = data_order_check(resume.path, find_manifest(resume.path), trainer.global_rank, shape)
        self._data_order = check if check.status == "pending" else None
        return check

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._resume = None
        self._fit_started = False
        self._data_order = None
        self._attest = None
        self._agreeing = False


def _retention(trainer: Any, path: Path) -> Retention | None:
    """How the `ModelCheckpoint` saving into `path`'s directory removes checkpoints as it saves: the
    `save_top_k` best by its monitor, or the newest without one. None where it keeps them all, and
    where several share the directory (each removes only its own)."""
    directory = os.path.realpath(path.parent)
    savers = [
        callback
        for callback in getattr(trainer, "checkpoint_callbacks", [])
        if getattr(callback, "dirpath", None) is not None and os.path.realpath(callback.dirpath) == directory
    ]
    if len(savers) != 1 or not isinstance(getattr(savers[0], "save_top_k", None), int) or savers[0].save_top_k < 1:
        return None
    keep, monitor = savers[0].save_top_k, getattr(savers[0], "monitor", None)
    return Retention(best=keep, metric=monitor) if monitor else Retention(newest=keep)
