"""Hugging Face Trainer integration: `Trainer(callbacks=[CkptspecCallback(spec=...)])`.

At every save the callback writes `.ckptspec.yaml` into the Trainer's `checkpoint-N/` (so that
`save_total_limit` deletes it with the directory) and keeps its own record of the run (data
position, what was saved, generator digests, construction config, the fingerprint's outputs) in
`trainer_state.json`, which is the one file of the checkpoint a resume hands to callbacks. On
`trainer.train(resume_from_checkpoint=...)` it checks what the Trainer lets pass silently, and raises
`RestoreError` before the first optimizer step after the resume:

- model, optimizer and scheduler at `on_train_begin` (the Trainer has loaded them by then): the
  optimizer and scheduler restored (the Trainer skips both when either file is missing), the
  construction config against the saved `config.json`, the keys a non-strict load left out or
  ignored, the fingerprint batch replayed;
- the data position at `on_train_begin`: another dataset length or batch size makes the Trainer
  skip a number of samples computed from the new dataloader, not the ones the saved run consumed;
- the random generators at the first `on_step_begin`: the Trainer puts `rng_state.pth` back only
  once the first batch after the resume is drawn.

Each manifest records the save's lineage (its run, and its parent: the previous save, or the
checkpoint resumed from where the callback can tell which one that is; see `_note_resume`).

No callback event names the checkpoint being resumed, and a resumed checkpoint may have been moved
out of `output_dir`: every check therefore compares the live objects with the record the resumed
`trainer_state.json` carries, never with a path.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from ._documents import load_manifest, save_document
from ._sidecars import TRAINER_STATE, manifest_path_for
from ._exceptions import DocumentError, RestoreError, RestoreNote
from ._models import DataPositionRule, Manifest, Requirement, Retention, Spec
from .adapters._hf_resume import (
    compared_with_record,
    config_problems,
    data_position_problems,
    fingerprint_problems,
    model_key_problems,
    moment_problems,
    refuse_resume,
    rng_problems,
    training_state_problems,
)
from .adapters._hf_state import (
    broadcast,
    construction_config,
    dataset_length,
    distributed,
    gathered,
    optimizer_state,
    optimizer_steps,
    process_rank,
    rng_digest,
    scheduler_step,
    unwrapped,
)
from .adapters._lineage import ledger_for
from .adapters._next_batches import BatchDrawn, BatchesDrawn, DataOrderCheck, LoaderShape, Recorder, data_order_check, judged_together, trained_on
from .adapters._spec import as_spec, requirement
from .adapters._torch_loader import batch_crc32c
from .adapters._torch_replay import capture_fingerprint_for, fingerprint_record
from .formats.hf_training import CALLBACK_RECORD, read_document, saved_with_callback

__all__ = ["CkptspecCallback", "last_checkpoint"]

RECORD_KEY = CALLBACK_RECORD
"""The callback's record in `trainer_state.json`, under `stateful_callbacks`: a name no callback class
has, so that the Trainer neither rebuilds the callback from it nor drops it (see `_load_callback_state`)."""
_CHECKPOINT_NAME = re.compile(r"checkpoint-\d+")
"""The Trainer's name for the checkpoint of a step in its output directory."""
_log = logging.getLogger("ckptspec")
FINGERPRINT_FILE = "ckptspec_fingerprint.safetensors"
"""The fixed batch and the outputs the saved model gave on it, beside the Trainer's files."""
_RECORD_VERSION = 1


def last_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The newest `checkpoint-N/` of `output_dir` that the Trainer finished writing (it holds
    `trainer_state.json`, which the Trainer writes last), for `resume_from_checkpoint`; None when
    there is none. `resume_from_checkpoint=True` takes the newest directory by its name, also one
    whose save was killed while the Trainer wrote it."""
    directory = Path(output_dir)
    if not directory.is_dir():
        return None
    finished = [
        (int(path.name.removeprefix("checkpoint-")), path)
        for path in directory.iterdir()
        if _CHECKPOINT_NAME.fullmatch(path.name) and path.is_dir() and (path / TRAINER_STATE).is_file()
    ]
    return max(finished)[1] if finished else None


class CkptspecCallback(TrainerCallback):
    """Records a manifest into every `checkpoint-N/` and checks `Trainer.train(resume_from_checkpoint=...)`.

    Args:
        spec: the spec (or its YAML path) checkpoints are written and checked against. Without one,
            everything the checkpoint holds must be restored.
        fingerprint_batch: a fixed batch (tensor, tuple or dict of tensors, as the model's `forward`
            takes) run through the model in eval mode at each save; its outputs are recorded and
            replayed on resume. Keep it small: its outputs are kept in `trainer_state.json`.
        fork: training from the resumed checkpoint is a new run (a fine-tune): the next save begins
            a run of its own from it. Without it, each save continues the checkpoint's run and
            names it as its parent (the manifest's `lineage`).

    After a resume, `last_report` lists what was checked.
    """

    def __init__(self, *, spec: Spec | str | os.PathLike[str] | None = None, fingerprint_batch: Any = None, fork: bool = False) -> None:
        self.spec = as_spec(spec)
        self.fork = fork
        self.fingerprint_batch = fingerprint_batch
        self.last_report: dict[str, Any] | None = None
        self._dataset_length: int | None = None
        self._saved: dict[str, Any] | None = None
        """The resumed checkpoint's record, until the generators have been checked at the first step."""
        self._pending_fingerprint: Any = None
        self._next_batches = Recorder()
        self._data_order: DataOrderCheck | None = None
        self._watching: torch.utils.hooks.RemovableHandle | None = None
        self._agreeing = False
        """Whether the ranks still share their verdicts on the batches after a resume."""

    # --- saving -------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._agreeing = False
        self._dataset_length = dataset_length(kwargs.get("train_dataloader"))
        if state.is_world_process_zero:
            self._complete_interrupted_saves(Path(args.output_dir))
        if state.global_step > 0:  # resumed: the state, and the record in it, came from the checkpoint's trainer_state.json
            saved = state.stateful_callbacks.get(RECORD_KEY)
            self._check_resume(args, state, saved, kwargs)
            resumed = self._note_resume(args, state.global_step, saved)
            self._watch_data_order(args, resumed, saved)
            self._agreeing = distributed()
        self._stop_watching()  # a train() that raised never reached on_train_end: its model is not this one
        model = kwargs.get("model")
        if model is not None:
            self._watching = unwrapped(model).register_forward_pre_hook(self._forward, with_kwargs=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop_watching()

    def _stop_watching(self) -> None:
        if self._watching is not None:
            self._watching.remove()
            self._watching = None

    def _forward(self, module: torch.nn.Module, inputs: tuple[Any, ...], named: dict[str, Any]) -> None:
        """A training batch about to go through the model: checked against the run's after a resume,
        recorded after a save; under several processes every rank learns the others' verdicts until
        no check is pending, so that all raise together. Evaluation and the fingerprint run in eval
        mode, and are not batches."""
        if not module.training:
            return
        if not self._agreeing:
            self._judge(inputs, named)
            return
        self._agreeing = judged_together(functools.partial(self._judge, inputs, named), lambda: self._data_order, gathered)

    def _judge(self, inputs: tuple[Any, ...], named: dict[str, Any]) -> None:
        if self._data_order is None and not self._next_batches.waiting:
            return
        check, self._data_order = self._data_order, None
        self._data_order = trained_on(check, self._next_batches, BatchDrawn(batch_crc32c({"inputs": inputs, "named": named})))

    def _watch_data_order(self, args: Any, resumed: tuple[Path, Path] | None, saved: Any) -> None:
        """The check of the first batches the resumed run trains on, against the ones the run
        trained on after the save; the report says why where there is none."""
        rule = self.spec.components.data_position if self.spec is not None else DataPositionRule()
        if self.last_report is None or rule.on_resume != "restore" or rule.next_batches == 0:
            return
        saved_world = saved["data"].get("world_size") if isinstance(saved, Mapping) else None
        if resumed is None:
            check = DataOrderCheck(Path(self.last_report["checkpoint"]), process_rank(), "unchecked", "the checkpoint resumed from and its manifest were not found")
        elif isinstance(saved_world, int) and saved_world != max(args.world_size, 1):
            reason = f"saved by {saved_world} processes, resumed by {max(args.world_size, 1)}: each one draws another share of the data"
            check = DataOrderCheck(resumed[0], process_rank(), "unchecked", reason)
        else:
            check = data_order_check(resumed[0], resumed[1], process_rank(), LoaderShape(samples=self._dataset_length, drawn_in_epoch=0))
        self.last_report["data_order"] = check
        if check.status == "unchecked":
            warnings.warn(RestoreNote(f"{check.checkpoint}: data order not checked: {check.reason}"), stacklevel=3)
        else:
            self._data_order = check

    def _complete_interrupted_saves(self, output_dir: Path) -> None:
        """Write the manifest of each `checkpoint-N/` whose save stopped after the Trainer wrote it
        (`trainer_state.json`, its last file, holds this callback's record) and before its manifest:
        the roll-forward of a save killed between the two, or after the Trainer's `save_total_limit`
        removed the checkpoints before it. Its manifest is built from its files and the record, with
        no lineage (no process now knows its parent)."""
        if not output_dir.is_dir():
            return
        for checkpoint in sorted(output_dir.iterdir()):
            if _CHECKPOINT_NAME.fullmatch(checkpoint.name) is None or not checkpoint.is_dir() or checkpoint.is_symlink():
                continue
            if os.path.lexists(manifest_path_for(checkpoint)) or not saved_with_callback(checkpoint):
                continue
            record = read_document(checkpoint / TRAINER_STATE)["stateful_callbacks"][RECORD_KEY]
            manifest = self._manifest(checkpoint, record)
            save_document(manifest, manifest_path_for(checkpoint))
            _log.warning("%s: its save was interrupted before its manifest was written; written now from its files", checkpoint)

    def _note_resume(self, args: Any, global_step: int, saved: Any) -> tuple[Path, Path] | None:
        """Tell the run's ledger which checkpoint the Trainer resumed from: the one `args` names,
        else the one at the place it was saved (its record says where), else `checkpoint-N` of the
        output directory; the first whose manifest records this global step. A checkpoint moved
        since and resumed from elsewhere is known to no callback: the next save then begins a run
        of its own. Returns the checkpoint and its manifest's path, where one was found."""
        named = [args.resume_from_checkpoint] if isinstance(args.resume_from_checkpoint, str) else []
        saved_at = [saved["saved_at"]] if isinstance(saved, Mapping) and isinstance(saved.get("saved_at"), str) else []
        for candidate in map(Path, [*named, *saved_at, os.path.join(args.output_dir, f"checkpoint-{global_step}")]):
            manifest_path = manifest_path_for(candidate)
            try:
                manifest = load_manifest(manifest_path)
            except DocumentError:
                continue
            position = manifest.components.data_position
            if position is not None and position.global_step == global_step:
                ledger_for(self).resumed(candidate, manifest_path, manifest, fork=self.fork)
                return candidate, manifest_path
        return None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:
            self._record(args, state, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:
            self._record(args, state, kwargs)

    def _record(self, args: Any, state: Any, kwargs: Mapping[str, Any]) -> None:
        """Put this save's record into the state the Trainer is about to write as `trainer_state.json`."""
        model, optimizer, scheduler = kwargs.get("model"), kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)
        record: dict[str, Any] = {
            "version": _RECORD_VERSION,
            "global_step": state.global_step,
            "saved_at": os.path.abspath(os.path.join(args.output_dir, f"checkpoint-{state.global_step}")),
            "data": {
                "dataset_length": self._dataset_length,
                "per_device_batch_size": args.per_device_train_batch_size,
                "gradient_accumulation_steps": args.gradient_accumulation_steps,
                "world_size": max(args.world_size, 1),
                "batch_size": batch_size,
                "samples_seen": state.global_step * batch_size,
            },
            "optimizer_steps": optimizer_steps(optimizer),
            "optimizer_state": gathered(optimizer_state(optimizer)),
            "scheduler_step": scheduler_step(scheduler),
            "rng": gathered(rng_digest()),
            "config": construction_config(model),
            "model_keys": sorted(model.state_dict()) if model is not None else None,
        }
        self._pending_fingerprint = None
        if self.fingerprint_batch is not None and model is not None:
            fingerprint = capture_fingerprint_for("CkptspecCallback", unwrapped(model), self.fingerprint_batch)
            record["fingerprint"] = {"outputs": {name: _values(tensor) for name, tensor in fingerprint["outputs"].items()}}
            self._pending_fingerprint = fingerprint
        state.stateful_callbacks[RECORD_KEY] = record

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if distributed():
            # Each rank writes its own rng_state_{rank}.pth after the Trainer's last barrier of the
            # save: the manifest is built once every rank's file is there.
            torch.distributed.barrier()
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        manifest_sha256 = None
        if state.is_world_process_zero and checkpoint.is_dir():
            self._write_manifest(checkpoint, state.stateful_callbacks.get(RECORD_KEY), _retention(args))
            manifest_sha256 = hashlib.sha256(manifest_path_for(checkpoint).read_bytes()).hexdigest()
        self._expect_next_batches(checkpoint, broadcast(manifest_sha256))

    def _expect_next_batches(self, checkpoint: Path, manifest_sha256: str | None) -> None:
        """After a save, on every rank: the batches this rank trains on next are digested and
        written into `checkpoint` once there are `next_batches` of them. The Trainer skips the
        batches a resumed epoch had trained on without passing them through the model, so the
        record's first batch is the resumed run's first."""
        wanted = (self.spec.components.data_position if self.spec is not None else DataPositionRule()).next_batches
        if manifest_sha256 is not None and wanted > 0:
            shape = LoaderShape(samples=self._dataset_length, drawn_in_epoch=0)
            self._next_batches.expect(BatchesDrawn(checkpoint, manifest_sha256, process_rank(), shape, wanted))

    def _write_manifest(self, checkpoint: Path, record: Mapping[str, Any] | None, retention: Retention | None) -> None:
        if self._pending_fingerprint is not None:
            _save_fingerprint(checkpoint / FINGERPRINT_FILE, self._pending_fingerprint)
        manifest = ledger_for(self).stamp(self._manifest(checkpoint, record), checkpoint, retention=retention)
        save_document(manifest, manifest_path_for(checkpoint))
        ledger_for(self).saved(checkpoint, manifest)

    def _manifest(self, checkpoint: Path, record: Mapping[str, Any] | None) -> Manifest:
        """The manifest of `checkpoint`, from its files and this callback's `record` of the save."""
        from .adopt import build_manifest

        manifest = build_manifest(checkpoint, self.spec)
        components = manifest.components
        if components.data_position is not None and record is not None:
            data = record["data"]
            fields = {key: data[key] for key in ("dataset_length", "batch_size", "samples_seen") if isinstance(data.get(key), int)}
            components.data_position = components.data_position.model_copy(update=fields)
        if self._pending_fingerprint is not None:
            rule = self.spec.components.fingerprint if self.spec is not None else None
            components.fingerprint = fingerprint_record(
                "/" + FINGERPRINT_FILE.split(".")[0], self._pending_fingerprint, atol=rule.atol if rule else 0.0, rtol=rule.rtol if rule else 0.0
            )
        known = {"fingerprint"} if components.fingerprint is not None else set()
        known |= {"data_position.dataset_length: trainer_state.json does not record it"} if record is not None else set()
        manifest.unknown = [entry for entry in manifest.unknown if entry not in known]
        return manifest

    # --- resuming -----------------------------------------------------------------------------

    def _check_resume(self, args: Any, state: Any, saved: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> None:
        where = f"checkpoint-{state.global_step}"
        if not isinstance(saved, Mapping) or saved.get("version") != _RECORD_VERSION:
            if self.spec is not None:
                raise RestoreError(
                    f"{where}: its trainer_state.json holds no ckptspec record: it was not saved with CkptspecCallback, "
                    "so nothing proves what this resume restores"
                )
            warnings.warn(RestoreNote(f"{where}: saved without CkptspecCallback; its resume is not checked"), stacklevel=2)
            return
        model = kwargs.get("model")
        problems = [
            *training_state_problems(saved, kwargs.get("optimizer"), kwargs.get("lr_scheduler"), self.spec),
            *data_position_problems(saved["data"], args, kwargs.get("train_dataloader"), state.global_step, self.spec),
            *config_problems(saved.get("config"), model, self.spec),
            *model_key_problems(saved.get("model_keys"), model, self.spec),
            *fingerprint_problems(saved.get("fingerprint"), model, self.fingerprint_batch, self.spec),
        ]
        if problems:
            refuse_resume(where, problems)
        self._saved = dict(saved) | {"checkpoint": where}
        self.last_report = {"checkpoint": where, "checked": ["model", "config", "optimizer", "scheduler", "data_position", "fingerprint"]}

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Before the first optimizer step, once every callback's `on_train_begin` has run and the
        Trainer has put `rng_state.pth` back (after drawing the first batch): the optimizer's
        moments and the generators against the saved ones. Every rank checks its own and learns the
        others' verdicts, so that all raise together (a rank left training alone would wait for the
        others forever)."""
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        checks_rng = self.spec is None or requirement(self.spec, "rng") is Requirement.required
        problems = moment_problems(saved, kwargs.get("optimizer"), kwargs.get("model"), self.spec)
        if checks_rng:
            problems.extend(rng_problems(saved))
        everyone = [problem for problems_of_rank in gathered(problems) for problem in problems_of_rank]
        if everyone:
            refuse_resume(saved["checkpoint"], list(dict.fromkeys(everyone)))
        if self.last_report is not None:
            if checks_rng:
                self.last_report["checked"].append("rng")
            ledger_for(self).attested(compared_with_record(saved, self.spec, checks_rng), self.last_report.get("data_order"))


def _retention(args: Any) -> Retention | None:
    """How the Trainer removes its checkpoints as it saves: all but the newest `save_total_limit`,
    never the best model's where `metric_for_best_model` ranks them (`load_best_model_at_end` sets it)."""
    limit = args.save_total_limit
    if limit is None or limit <= 0:
        return None
    metric = args.metric_for_best_model
    return Retention(newest=limit, best=1 if metric else None, metric=metric or None)


def _values(tensor: torch.Tensor) -> dict[str, Any]:
    """A small tensor as JSON keeps it exactly (floats round-trip through their shortest repr)."""
    return {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape), "data": tensor.detach().cpu().flatten().tolist()}


def _save_fingerprint(path: Path, fingerprint: Mapping[str, Any]) -> None:
    from safetensors.torch import save_file

    tensors = {f"args.{index}": arg for index, arg in enumerate(fingerprint["args"])}
    tensors |= {f"kwargs.{key}": arg for key, arg in fingerprint["kwargs"].items()}
    tensors |= {name: tensor for name, tensor in fingerprint["outputs"].items()}
    partial = path.with_name(f".{path.name}.partial")
    save_file({name: tensor.contiguous() for name, tensor in tensors.items()}, str(partial))
    os.replace(partial, path)

