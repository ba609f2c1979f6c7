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
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._documents import load_manifest, save_document
from ._sidecars import manifest_path_for
from ._exceptions import AdapterError, RestoreError, RestoreNote, WriteError
from ._models import (
    UNKNOWN,
    ConfigRecord,
    DataPositionRule,
    FileEntry,
    FingerprintRule,
    Manifest,
    ManifestComponents,
    RankState,
    RanksRecord,
    Requirement,
    RngRecord,
    Spec,
)
from ._pointer import join_pointer
from .signing import remove_sidecars
from ._commit import as_committed, saving
from ._records import file_algorithms, file_entry, now_iso, producer, saved_algorithms, spec_ref, write_manifest
from ._scan import Algorithm, FileDigests
from .adapters import import_installed_frameworks
from .adopt import build_manifest
from .formats.dcp import open_dcp_directory

_NAMESPACES = import_installed_frameworks("lightning.pytorch", "pytorch_lightning", extra="lightning")

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
    ModelCheck,
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
from .adapters._torch_records import (  # noqa: E402
    data_position_record,
    optimizer_record,
    parameter_names,
    scaler_record,
    scheduler_record,
    tensor_inventory,
    tensor_roles,
)
from .adapters._torch_replay import (  # noqa: E402
    capture_fingerprint,
    capture_fingerprint_for,
    capture_rng,
    check_fingerprint,
    fingerprint_record,
    restore_rng,
    rng_record,
)
from .adapters._torch_io import WrittenFile, load_failure, write_staged  # noqa: E402
from .adapters._next_batches import BatchDrawn, BatchesDrawn, DataOrderCheck, LoaderShape, Recorder, data_order_check  # noqa: E402
from .adapters._torch_loader import batch_crc32c  # noqa: E402
from .adapters._torch_tensors import jsonable, omegaconf_content  # noqa: E402

_PLAIN_IOS = {namespace.plugins.TorchCheckpointIO for namespace in _NAMESPACES}

__all__ = ["CkptspecCallback", "FingerprintReplay", "HyperparameterChange", "RestoreNote", "RestoreReport"]


class CkptspecCallback(*(namespace.Callback for namespace in _NAMESPACES)):  # type: ignore[misc]
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
        self._resume: _Resume | None = None
        self._fit_started = False
        self.fork = fork
        self._start_state: str | None = None
        self._next_batches = Recorder()
        """The saves still waiting for the batches drawn after them (next-batch identity)."""
        self._data_order: DataOrderCheck | None = None
        """The resume's first batches against those the run drew after the save, until decided."""
        self._attest: _Resume | None = None
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
        if not isinstance(trainer.strategy.checkpoint_io, _ManifestCheckpointIO):
            trainer.strategy.checkpoint_io = _ManifestCheckpointIO(trainer.strategy.checkpoint_io, self)
        _wrap_strategy_saves(trainer.strategy, self)
        for callback in trainer.checkpoint_callbacks:
            _mirror_last_links(callback)

    def state_dict(self) -> dict[str, Any]:
        if self._trainer is None or self._module is None:
            return {}
        state: dict[str, Any] = {"data_position": _data_position(self._trainer)}
        if self.spec is None or requirement(self.spec, "rng") is not Requirement.forbidden:
            state["rng"] = capture_rng()
        if self._trainer.world_size > 1:
            # Every rank calls state_dict for each save; only rank 0's copy is written.
            state["ranks"] = _gathered({key: state[key] for key in ("data_position", "rng") if key in state}, self._trainer.world_size)
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
            shape = LoaderShape(samples=_samples(trainer), drawn_in_epoch=0)
            self._next_batches.expect(BatchesDrawn(path, manifest_sha256, trainer.global_rank, shape, wanted))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """The batch about to be trained on: checked against the run's after a resume, recorded after a save."""
        if self._attest is not None:
            resume, self._attest = self._attest, None
            self._attest_restored(trainer, resume)
        if self._data_order is None and not self._next_batches.waiting:
            return
        drawn = BatchDrawn(batch_crc32c(batch))
        if self._data_order is not None:
            check, self._data_order = self._data_order, None
            check.check(drawn)  # RestoreError, before the first optimizer step on a batch the run did not draw
            if check.status == "pending":
                self._data_order = check
        self._next_batches.drawn(drawn)

    def _attest_restored(self, trainer: Any, resume: _Resume) -> None:
        """After every hook of the restore (a module's `on_load_checkpoint` or `on_train_start` can
        undo it), before the first optimizer step: the live optimizers, schedulers and scaler
        against the state the manifest recorded."""
        restored = self.last_report.restored if self.last_report is not None else ()
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        raise_if_problems(str(resume.path), restored_state_differences(resume.manifest, restored, trainer.optimizers, schedulers, scaler))

    def describe(self, path: Path, files: list[FileEntry], components: ManifestComponents, unknown: list[str]) -> Manifest:
        """The manifest of the checkpoint this trainer wrote to `path` (`files`), holding `components`."""
        manifest = Manifest(
            format="lightning",
            checkpoint=path.name,
            created=now_iso(),
            producer=producer({"torch": torch.__version__, **_lightning_version(self._trainer)}),
            spec=spec_ref(self.spec) if self.spec is not None else None,
            files=files,
            components=components,
            unknown=unknown,
        )
        return ledger_for(self._module).stamp(manifest, path, start_sha256=self._start_state)

    def components(self, checkpoint: Mapping[str, Any], written_crc32c: Mapping[tuple[int, int], str] | None = None) -> ManifestComponents:
        """What `checkpoint` holds, as its manifest records it; the model's tensors take the CRC32Cs
        of their storages taken as the file was written (`written_crc32c`), where there are some."""
        trainer, module = self._trainer, self._module
        names = parameter_names(module)
        scaler_key = type(trainer.precision_plugin).__qualname__
        checksums = self.spec is None or self.spec.integrity.tensor_checksum == "crc32c"
        return ManifestComponents(
            model=tensor_inventory(
                "/state_dict", checkpoint["state_dict"], tensor_roles(module), checksums=checksums, known=written_crc32c
            ),
            config=ConfigRecord(
                modules=module_configs(module), hyperparameters=_hyperparameters(checkpoint.get("hyper_parameters", {}))
            ),
            optimizer=[
                optimizer_record(f"/optimizer_states/{index}", optimizer, state, names)
                for index, (optimizer, state) in enumerate(zip(trainer.optimizers, checkpoint.get("optimizer_states", [])))
            ] or None,
            scheduler=[
                scheduler_record(f"/lr_schedulers/{index}", config.scheduler, state)
                for index, (config, state) in enumerate(zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])))
            ] or None,
            scaler=scaler_record(f"/{scaler_key}", checkpoint[scaler_key]) if "scale" in checkpoint.get(scaler_key, {}) else None,
            **self._own_records(checkpoint),
        )

    def _own_records(self, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
        """The components the callback itself saved into `checkpoint`, as the manifest records them."""
        ours = checkpoint.get("callbacks", {}).get(self.state_key, {})
        base = join_pointer(["callbacks", self.state_key])
        fingerprint_rule = self.spec.components.fingerprint if self.spec is not None else FingerprintRule()
        return {
            "rng": rng_record(f"{base}/rng", ours["rng"]) if "rng" in ours else None,
            "data_position": data_position_record(f"{base}/data_position", ours["data_position"]) if "data_position" in ours else None,
            "fingerprint": fingerprint_record(
                f"{base}/fingerprint", ours["fingerprint"], atol=fingerprint_rule.atol, rtol=fingerprint_rule.rtol
            ) if "fingerprint" in ours else None,
            "ranks": _ranks_record(f"{base}/ranks", ours["ranks"]) if "ranks" in ours else None,
        }  # fmt: skip

    def directory_manifest(self, path: Path, checkpoint: Mapping[str, Any]) -> Manifest:
        """The manifest of the sharded directory a strategy saved at `path` (`checkpoint` without the
        state the strategy split into the shards): the files as adoption reads them back, every chunk
        checksummed, with what only the callback knows (construction constants, generators, data
        position, every rank's state, the fingerprint)."""
        read = build_manifest(path, self.spec)
        hyperparameters = read.components.config.hyperparameters if read.components.config is not None else {}
        own = {key: value for key, value in self._own_records(checkpoint).items() if value is not None}
        optimizers = [
            record.model_copy(update={"type": qualified_name(optimizer)})
            for record, optimizer in zip(read.components.optimizer or [], self._trainer.optimizers)
        ]
        components = read.components.model_copy(
            update={"config": ConfigRecord(modules=module_configs(self._module), hyperparameters=hyperparameters),
                    "optimizer": optimizers or None, **own}
        )  # fmt: skip
        settled = {"config", "optimizer.type", *own}
        unknown = [entry for entry in read.unknown if not settled & {entry.partition(":")[0], entry.partition(".")[0]}]
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
            notes.extend(hyperparameter_notes(saved_hyperparameters, _hyperparameters(pl_module.hparams), self.overrides))
        saved_state, live_state = checkpoint.get("state_dict"), pl_module.state_dict()
        if saved_state is None:  # a sharded directory: the strategy loaded the shards into the model itself
            saved_state, live_state = {}, _AsSaved(live_state, _model_chunks(path))
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
        self._resume = _Resume(path, manifest, spec, saved_groups, model_check, fingerprint, own, notes)
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
            found = _foreign_generators(recorded, ranks)
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

    def _optimizer_differences(self, trainer: Any, pl_module: Any, resume: _Resume) -> list[str]:
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

    def _watch_data_order(self, trainer: Any, resume: _Resume) -> DataOrderCheck | None:
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
        shape = LoaderShape(samples=_samples(trainer), drawn_in_epoch=0)
        check = data_order_check(resume.path, find_manifest(resume.path), trainer.global_rank, shape)
        self._data_order = check if check.status == "pending" else None
        return check

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._resume = None
        self._fit_started = False
        self._data_order = None
        self._attest = None


class _Resume:
    """What on_load_checkpoint learnt, kept for the checks that need the optimizers."""

    def __init__(
        self,
        path: Path,
        manifest: Manifest,
        spec: Spec,
        saved_groups: list[list[dict[str, Any]]],
        model_check: ModelCheck,
        fingerprint: FingerprintReplay | None,
        own: dict[str, Any],
        notes: list[str],
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.spec = spec
        self.saved_groups = saved_groups
        self.model_check = model_check
        self.fingerprint = fingerprint
        self.own = own
        """What this rank saved: its generators (`rng`) and data position."""
        self.overrides: dict[str, Any] = {}
        self.given: dict[str, bool] = {}
        self.restored_rng: list[str] = []
        self.notes = notes


class _AsSaved(Mapping[str, torch.Tensor]):
    """The live model state of a sharded resume as the save laid it out, looked up one tensor at a
    time: a sharded tensor (DTensor) is gathered whole, and its elements put in the order of the
    save's chunks, which is how the manifest's CRC32C counts them. Gathering is collective: every
    rank looks the tensors up in the same order, the manifest's."""

    def __init__(self, live: Mapping[str, torch.Tensor], chunks: Mapping[str, list[tuple[tuple[int, ...], tuple[int, ...]]]]) -> None:
        self.live = live
        self.chunks = chunks

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self.live[name]
        whole = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        boxes = sorted(self.chunks.get(name, []))
        if len(boxes) <= 1:
            return whole
        pieces = [whole[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))].reshape(-1) for offsets, sizes in boxes]
        return torch.cat(pieces).reshape(whole.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.live)

    def __len__(self) -> int:
        return len(self.live)


def _model_chunks(directory: Path) -> dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Model tensor name → its chunks' (offsets, sizes) in a Lightning sharded directory (saved
    under `model` by FSDPStrategy, `state_dict` by ModelParallelStrategy)."""
    return {
        str(tensor.path[1]): [(chunk.offsets, chunk.sizes) for chunk in tensor.chunks]
        for tensor in open_dcp_directory(directory).tensors
        if len(tensor.path) == 2 and tensor.path[0] in ("model", "state_dict")
    }


class _ManifestCheckpointIO(*(namespace.plugins.CheckpointIO for namespace in _NAMESPACES)):  # type: ignore[misc]
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


def _wrap_strategy_saves(strategy: Any, callback: CkptspecCallback) -> None:
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


def _samples(trainer: Any) -> int | None:
    """The length of the dataset the fit trains on; None where it has none (an iterable dataset, several loaders)."""
    loader = trainer.train_dataloader
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):
        return None


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


def _mirror_last_links(checkpoint_callback: Any) -> None:
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


def _gathered(state: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """`state` of every rank, in rank order."""
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, state)
    return gathered


def _foreign_generators(recorded: RanksRecord, ranks: list[dict[str, Any]]) -> list[str]:
    """How the per-rank state in the file differs from what the manifest recorded of each rank: a
    rank missing, or generators that are not the ones that rank saved (restoring them would give it
    another rank's draws, or nobody's)."""
    if recorded.world_size != len(ranks):
        return [f"ranks: the manifest records world size {recorded.world_size}, the checkpoint holds {len(ranks)} ranks' state"]
    digests = {state.rank: _digests(state.rng) for state in recorded.states if state.rng is not None}
    problems = []
    for rank, state in enumerate(ranks):
        if "rng" not in state or rank not in digests:
            continue
        found = _digests(rng_record(f"{recorded.at}/{rank}/rng", state["rng"]))
        if found != digests[rank]:
            source = next((f"rank {other}'s" for other, saved in digests.items() if saved == found), "not any saved rank's")
            problems.append(f"rank {rank}: the random generator states the checkpoint holds for it are {source}, "
                            "not the ones it saved")  # fmt: skip
    return problems


def _digests(record: RngRecord) -> dict[str, str | None]:
    return {generator.name: generator.sha256 for generator in record.generators}


def _ranks_record(at: str, states: list[dict[str, Any]]) -> RanksRecord:
    """Every rank's generators and data position, as `state_dict` gathered them."""
    return RanksRecord(
        at=at,
        world_size=len(states),
        states=[
            RankState(
                rank=rank,
                rng=rng_record(f"{at}/{rank}/rng", state["rng"]) if "rng" in state else None,
                data_position=data_position_record(f"{at}/{rank}/data_position", state["data_position"]),
            )
            for rank, state in enumerate(states)
        ],
    )


def _data_position(trainer: Any) -> dict[str, Any]:
    return {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "batch_in_epoch": trainer.fit_loop.epoch_loop.batch_progress.current.completed,
    }


def _lightning_version(trainer: Any) -> dict[str, str]:
    """The distribution and version of the namespace whose Trainer `trainer` is: `lightning` or `pytorch-lightning`."""
    namespace = next(namespace for namespace in _NAMESPACES if isinstance(trainer, namespace.Trainer))
    distribution = namespace.__name__.partition(".")[0].replace("_", "-")
    return {distribution: namespace.__version__}


def _hyperparameters(saved: Any) -> dict[str, Any]:
    """Lightning's hyper-parameters (a dict, `AttributeDict` or OmegaConf container) as JSON data."""
    converted = jsonable(saved)
    return converted if isinstance(converted, dict) else {}


def _unrecorded_hyperparameters(checkpoint: Mapping[str, Any]) -> list[str]:
    """The parts of the saved hyper-parameters with no JSON form (a path, an enum, a class), at any
    depth, each named by its path, so none is dropped silently."""
    saved = omegaconf_content(checkpoint.get("hyper_parameters", {}))
    return _left_out(saved, "config.hyperparameters") if isinstance(saved, Mapping) else []


def _left_out(value: Any, path: str) -> list[str]:
    """What `jsonable` leaves out of `value`: a mapping's entries that have no JSON form, and a list
    or tuple whole when one of its items has none."""
    value = omegaconf_content(value)
    if isinstance(value, Mapping):
        return [line for key, item in value.items() for line in _left_out(item, f"{path}.{key}")]
    why = _no_json_form(value)
    if why is not None:
        return [f"{path}: {why}"]
    if isinstance(value, (list, tuple)):
        return [line for index, item in enumerate(value) for line in _left_out(item, f"{path}[{index}]")]
    return []


def _no_json_form(value: Any) -> str | None:
    """Why `jsonable` gives `value` no JSON form (the words adoption uses); None when it has one."""
    if value is None or jsonable(value) is not None:
        return None
    if isinstance(value, (list, tuple)):
        index, why = next((index, why) for index, item in enumerate(value) if (why := _no_json_form(item)) is not None)
        return f"item {index} is {why}; the whole {type(value).__name__} is left out"
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}, which has no JSON form"
    if isinstance(value, float):
        return f"the float {value}, which has no JSON form"
    kind = type(value)
    return f"a {kind.__module__}.{kind.__qualname__}, which has no JSON form".replace(" builtins.", " ")
