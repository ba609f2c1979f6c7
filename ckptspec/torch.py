"""Save and restore plain PyTorch training state with a manifest, and enforce the spec on restore.

    import ckptspec.torch as ckpt

    ckpt.save("run/step-500.pt", model=model, optimizer=optimizer, scheduler=scheduler,
              data_position=position, fingerprint_batch=fixed_batch, spec="ckptspec.yaml")
    ...
    report = ckpt.restore("run/step-500.pt", model=model, optimizer=optimizer, scheduler=scheduler,
                          data_position=position, overrides={"lr": 1e-3})

`save` writes the checkpoint with `torch.save` and `<checkpoint>.ckptspec.yaml` beside it, both
atomically. `restore` checks everything a plain load leaves unchecked (construction constants,
tensors a loader skipped, optimizer layout and hyperparameters, components the spec requires,
the fingerprint replay) and raises `RestoreError` listing every difference, or returns a
`RestoreReport` (the same one `ckptspec.lightning` and `ckptspec.tensorflow` return).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Protocol

from ._dataclass import dataclass
from ._documents import load_manifest
from ._exceptions import AdapterError, ReaderError, RestoreError, RestoreNote
from ._models import ConfigRecord, FingerprintRule, Manifest, ManifestComponents, Requirement, Spec
from ._commit import saving
from ._records import file_algorithms, file_entry, now_iso, producer, saved_algorithms, spec_ref
from .adapters import import_framework

import_framework("torch", extra="torch")

import torch  # noqa: E402

from .adapters._torch_config import module_configs  # noqa: E402
from .adapters._overrides import checked_overrides  # noqa: E402
from .adapters._report import FingerprintReplay, HyperparameterChange, RestoreReport, report_notes, restored_components
from .adapters._spec import COMPONENTS, as_spec, effective_spec, find_manifest, raise_if_unmet, requirement, unmet_components  # noqa: E402
from .adapters._torch_enforce import (  # noqa: E402
    dropped_notes,
    optimizer_settings,
    raise_if_problems,
    restored_state_differences,
    unrecorded_notes,
)
from .adapters._lineage import ledger_for  # noqa: E402
from .adapters._next_batches import DataOrderCheck  # noqa: E402
from .adapters._torch_resumed import (  # noqa: E402
    attest_at_first_batch,
    check_first_save,
    check_loader,
    note_restored,
    record_next_batches,
    watch_resumed_loader,
)
from .adapters._sidecars import write_sidecars  # noqa: E402
from .adapters._torch_restore import before_loading, check_loaded, load_matching, load_optimizers, load_stateful, saved_parts  # noqa: E402
from .adapters._torch_io import WrittenFile, load_failure, torch_reason, write_staged_described  # noqa: E402
from .adapters._torch_records import (  # noqa: E402
    data_position_record,
    ema_record,
    optimizer_record,
    parameter_names,
    scaler_record,
    scheduler_record,
    tensor_inventory,
    tensor_roles,
)
from .adapters._torch_replay import (  # noqa: E402
    capture_fingerprint_for,
    capture_rng,
    fingerprint_record,
    restore_rng,
    rng_record,
)
from .adapters._torch_distributed import ShardedRestore, async_save_sharded, restore_sharded, save_sharded  # noqa: E402

__all__ = [
    "Checkpoint",
    "DataOrderCheck",
    "DataPosition",
    "FingerprintReplay",
    "HyperparameterChange",
    "RestoreNote",
    "RestoreReport",
    "ShardedRestore",
    "Stateful",
    "async_save_sharded",
    "load",
    "restore",
    "restore_sharded",
    "save",
    "save_sharded",
]

ModelLoader = Callable[["torch.nn.Module", Mapping[str, "torch.Tensor"]], Any]


class Stateful(Protocol):
    """Anything with `state_dict()` and `load_state_dict()`: schedulers, scalers, EMA, data positions."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


@dataclass
class DataPosition:
    """Where the run is in its data; pass it to `save` and `restore` (or any `Stateful` of your own)."""

    epoch: int = 0
    global_step: int = 0
    batch_in_epoch: int = 0
    samples_seen: int = 0
    sampler_seed: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for item in fields(self):
            if item.name in state:
                setattr(self, item.name, state[item.name])


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint loaded into memory with its manifest; `restore` never changes `state`."""

    path: Path
    manifest: Manifest
    state: dict[str, Any]


def save(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    scheduler: Stateful | Sequence[Stateful] | None = None,
    scaler: Stateful | None = None,
    ema: Stateful | None = None,
    data_position: Stateful | Mapping[str, Any] | None = None,
    loader: torch.utils.data.DataLoader | None = None,
    fingerprint_batch: Any = None,
    spec: Spec | str | os.PathLike[str] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
    export_program: bool = False,
    signing_key: str | os.PathLike[str] | None = None,
    durable: bool = False,
) -> Manifest:
    """Write the checkpoint with `torch.save` and its manifest beside it; returns the manifest.

    The previous checkpoint and its manifest are replaced together: a save killed at any moment
    leaves one pair or the other, and a failed save raises `WriteError` saying what was kept (see
    "What survives a crash" in the docs). `durable=True` also fsyncs the new file, its manifest and
    the directory in that order, so that the pair survives a power cut too (as torch.save, by
    default it does not: a power cut can lose what the page cache held).

    `export_program=True` also writes `<path>.pt2`, the model exported by `torch.export` on the
    fixed batch, which `ckptspec validate --replay` runs without the training code. With
    `signing_key` (or the `CKPTSPEC_SIGNING_KEY` variable) the checkpoint, its manifest and the
    program are signed (`<path>.sig`, see `ckptspec.signing`).

    `fingerprint_batch` (a tensor, a tuple of tensors or a dict of tensors) is stored with the
    model's eval-mode outputs for it, which `restore` replays. Random generator states (python,
    numpy, torch, CUDA) are always saved unless the spec forbids them. With a spec, components it
    requires must be given and forbidden ones must not be, or nothing is written (`AdapterError`).

    `loader`, the `DataLoader` the loop draws from, has the next batches it gives the loop (the
    spec's `components.data_position.next_batches`, 4 by default) digested, and written beside the
    checkpoint as `<path>.next-batches-<rank>.json` once drawn; a `restore` with `loader=` checks
    that the resumed run draws the same ones.

    The first save of `model` after a `restore` (without `fork=True`) checks that the optimizers
    and schedulers it is given are the ones restored: a step count below the one restored means one
    was built anew after the restore, and nothing is written (`RestoreError`, naming it).
    """
    path = Path(path)
    spec = as_spec(spec)
    optimizers, schedulers = _as_list(optimizer), _as_list(scheduler)
    check_loader(loader, f"{path} (not saved)")
    check_first_save(path, model, optimizers, schedulers)
    state = _training_state(model, optimizers, schedulers, scaler, ema, data_position, fingerprint_batch, hyperparameters, spec)
    if spec is not None:
        _check_spec_is_met(path, spec, state)

    if export_program and fingerprint_batch is None:
        raise AdapterError(f"{path}: export_program needs fingerprint_batch (it is the exported program's example input)")
    # The file's digests (the spec's, and the CRC32C that tells an interrupted save's record apart)
    # and the tensors' CRC32Cs are computed from the bytes as torch.save writes them.
    algorithms = saved_algorithms(file_algorithms(spec) if spec is not None else ())
    with saving(path, durable=durable) as commit:
        with commit.file() as staged:
            # The components are built while the last storages are written and before the file
            # takes its place: an error while recording the model keeps the previous pair.
            written, components = write_staged_described(
                state,
                staged,
                algorithms=algorithms,
                describe=functools.partial(_components, state, model, optimizers, schedulers, ema, spec),
            )
            manifest = Manifest(
                format="torch",
                checkpoint=path.name,
                created=now_iso(),
                producer=producer({"torch": torch.__version__}),
                spec=spec_ref(spec) if spec is not None else None,
                files=[file_entry(path, path.parent, algorithms=algorithms, digests=written.digests, size=written.size)],
                components=components,
            )
            manifest = ledger_for(model).stamp(manifest, path)
            commit.commit(staged, manifest)
        ledger_for(model).saved(path, manifest)
        write_sidecars(path, model=model, fingerprint=state.get("fingerprint"), export=export_program, signing_key=signing_key)
    if loader is not None:
        record_next_batches(path, loader, spec)
    return manifest


def _training_state(
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[Stateful],
    scaler: Stateful | None,
    ema: Stateful | None,
    data_position: Stateful | Mapping[str, Any] | None,
    fingerprint_batch: Any,
    hyperparameters: Mapping[str, Any] | None,
    spec: Spec | None,
) -> dict[str, Any]:
    """The dict `torch.save` writes: one key per component given."""
    state: dict[str, Any] = {"model": model.state_dict()}
    if optimizers:
        state["optimizers"] = [item.state_dict() for item in optimizers]
    if schedulers:
        state["schedulers"] = [item.state_dict() for item in schedulers]
    if scaler is not None and scaler.state_dict():
        state["scaler"] = scaler.state_dict()
    if ema is not None:
        state["ema"] = ema.state_dict()
    if spec is None or requirement(spec, "rng") is not Requirement.forbidden:
        state["rng"] = capture_rng()
    if data_position is not None:
        state["data_position"] = _position_state(data_position)
    if fingerprint_batch is not None:
        state["fingerprint"] = capture_fingerprint_for("ckptspec.torch.save", model, fingerprint_batch)
    if hyperparameters is not None:
        state["hyperparameters"] = dict(hyperparameters)
    return state


_STATE_KEYS = {"optimizer": "optimizers", "scheduler": "schedulers"}
"""Components stored under another key of the saved dict."""
_ARGUMENTS = {"fingerprint": "fingerprint_batch"}
"""Components passed under another argument name."""


def _check_spec_is_met(path: Path, spec: Spec, state: Mapping[str, Any]) -> None:
    present = {name: _STATE_KEYS.get(name, name) in state for name in COMPONENTS}
    problems = unmet_components(spec, present, given_as={name: _ARGUMENTS.get(name, name) for name in COMPONENTS})
    missing_fields = _missing_position_fields(spec, state.get("data_position"))
    if missing_fields:
        problems.append(f"components.data_position.fields lists {missing_fields}, but the data position has none")
    raise_if_unmet(spec, problems, by=f"{path} (not saved)")


def load(path: str | os.PathLike[str], *, map_location: Any = "cpu") -> Checkpoint:
    """Read a checkpoint written by `save` (or adopted) and its manifest (found beside the link target for a symlink).

    The file is read with `torch.load(weights_only=True)`; one that pickles other objects (an
    `argparse.Namespace`, OmegaConf containers) is a `RestoreError`. To restore it anyway, load it
    yourself and pass `Checkpoint(path, manifest, state)` to `restore`. A file torch cannot load
    (truncated, damaged, not a checkpoint) is a `ReaderError` naming it and what is wrong
    (`CorruptCheckpointError` for damaged bytes).
    """
    path = Path(path)
    manifest = load_manifest(find_manifest(path))
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises what its zip reader or unpickler happened to hit
        failure = load_failure(path, exc)
        reason = torch_reason(exc)
        if type(failure) is ReaderError and "Unsupported global" in reason:  # sound bytes, globals it will not run
            raise RestoreError(
                f"{path}: torch.load(weights_only=True) refuses it ({reason}); if you trust the file, "
                "load it yourself and restore ckptspec.torch.Checkpoint(path, load_manifest(...), state)"
            ) from None
        raise failure from None
    return Checkpoint(path=path, manifest=manifest, state=state)


def restore(
    checkpoint: Checkpoint | str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    scheduler: Stateful | Sequence[Stateful] | None = None,
    scaler: Stateful | None = None,
    ema: Stateful | None = None,
    data_position: Stateful | None = None,
    loader: torch.utils.data.DataLoader | None = None,
    spec: Spec | str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    rng: bool = True,
    model_loader: ModelLoader | None = None,
    map_location: Any = "cpu",
    fork: bool = False,
) -> RestoreReport:
    """Restore everything given from `checkpoint` and prove the result is the run that was saved.

    The model's next `save` names `checkpoint` as its parent (the manifest's `lineage`) and carries
    its run id; `fork=True` declares that training from here is a new run (a fine-tune), which
    then gets its own run id.

    Checked before anything is loaded: construction constants of every module, the optimizer's
    parameters by name and shape, optimizer hyperparameters the optimizer was built with that
    loading would silently replace, and the components the spec requires. Checked after: every
    saved tensor really landed in the model (CRC32C), the fixed batch replays to the stored
    outputs (exactly, or within the spec's fingerprint atol/rtol), and the live optimizers,
    schedulers and GradScaler hold the saved state (each parameter's moments by CRC32C, the step
    counts, the scale), measured right after loading, or with `loader=` before its first batch.

    `overrides` (e.g. `{"lr": 1e-3}`, or Keras's name `learning_rate`) changes optimizer hyperparameters
    on purpose; they are set after loading, are limited to the spec's `components.optimizer.overridable`,
    and are listed in the report with both values; an override of a setting the optimizer lacks, one the
    spec does not allow, or any override without an optimizer raises `AdapterError` before anything is
    loaded. `model_loader(model, state_dict)` replaces the default loader (which loads the tensors whose
    name and shape match); its result is verified like any other. The spec defaults to the one the
    checkpoint was saved against, else to "everything the checkpoint holds".

    `loader`, the `DataLoader` the resumed loop draws from, is checked as it draws: before its first
    batch, every generator restored must still hold its restored state (not re-seeded, not drawn
    from); its first batches must be the ones the run drew after the save, as `save(loader=)`
    recorded them (or the ones from the save's place in the epoch, for a loop that draws the
    epoch again and skips what it already trained on). Either failure is a `RestoreError` raised
    where the loop draws; `report.data_order` follows the check, and a checkpoint with no record to
    check against is named in `report.notes`.
    """
    loaded = checkpoint if isinstance(checkpoint, Checkpoint) else load(checkpoint, map_location=map_location)
    manifest = loaded.manifest
    saved = saved_parts(loaded.path, manifest, loaded.state)
    spec = effective_spec(as_spec(spec), manifest)
    optimizers, schedulers = _as_list(optimizer), _as_list(scheduler)
    given = {
        "optimizer": bool(optimizers),
        "scheduler": bool(schedulers),
        "scaler": scaler is not None,
        "ema": ema is not None,
        "rng": rng,
        "data_position": data_position is not None,
        "fingerprint": True,
    }
    checked = checked_overrides(str(loaded.path), overrides, spec, optimizer_settings(optimizers))
    problems, config_notes = before_loading(manifest, saved, spec, given, model, optimizers, schedulers, checked)
    raise_if_problems(str(loaded.path), problems)
    data_order = watch_resumed_loader(loaded.path, find_manifest(loaded.path), loader, spec) if loader is not None else None

    (model_loader or load_matching)(model, saved.model)
    changes = load_optimizers(optimizers, saved.optimizers, checked)
    load_stateful(saved, schedulers, scaler, ema, data_position)

    model_check, fingerprint = check_loaded(loaded.path, manifest, saved, spec, model, ema)
    restored_rng = restore_rng(saved.rng) if rng and saved.rng is not None else []
    restored, not_restored = restored_components(manifest, {**given, "rng": bool(restored_rng)})
    notes = [*config_notes, *unrecorded_notes(manifest), *dropped_notes(not_restored)]
    if data_order is not None and data_order.status == "unchecked":
        notes.append(f"data order not checked: {data_order.reason}")
    grad_scaler = scaler if isinstance(scaler, torch.amp.GradScaler) else None
    training_state = functools.partial(restored_state_differences, manifest, restored, optimizers, schedulers, grad_scaler)
    if loader is None:
        raise_if_problems(str(loaded.path), training_state())
    ledger = ledger_for(model)
    ledger.resumed(loaded.path, find_manifest(loaded.path), manifest, fork=fork)
    measured = [name for name in restored if name in _MEASURED] + (["fingerprint"] if fingerprint is not None else [])

    def attested(more: Sequence[str]) -> None:
        ledger.attested([*measured, *more], data_order)

    if not fork:  # a fine-tune may build its optimizer and schedule anew
        note_restored(model, loaded.path, optimizers, schedulers)
    if loader is None:
        attested([])
    else:
        attest_at_first_batch(loaded.path, loader, restored_rng, training_state, attested)
    return RestoreReport(
        checkpoint=loaded.path,
        restored=restored,
        not_restored=not_restored,
        tensors_saved=model_check.saved,
        tensors_loaded=model_check.loaded,
        left_fresh=model_check.left_fresh,
        ignored=model_check.ignored,
        generators=tuple(restored_rng),
        changes=tuple(changes),
        data_position=dict(saved.data_position) if isinstance(saved.data_position, Mapping) else {},
        fingerprint=fingerprint,
        notes=report_notes(loaded.path, notes),
        data_order=data_order,
    )


_MEASURED = ("model", "optimizer", "scheduler", "scaler")
"""What a restore measures on the live objects and the lineage records as attested; the generators
count where the loop's loader showed they were kept until its first batch."""


def _components(
    state: Mapping[str, Any],
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[Stateful],
    ema: Stateful | None,
    spec: Spec | None,
    written: WrittenFile,
) -> ManifestComponents:
    """The manifest's components; the tensors take the CRC32Cs of their storages as written."""
    checksums = spec is None or spec.integrity.tensor_checksum == "crc32c"
    names = parameter_names(model)
    fingerprint_rule = spec.components.fingerprint if spec is not None else FingerprintRule()
    return ManifestComponents(
        model=tensor_inventory("/model", state["model"], tensor_roles(model), checksums=checksums, known=written.storage_crc32c),
        config=ConfigRecord(modules=module_configs(model), hyperparameters=dict(state.get("hyperparameters", {}))),
        optimizer=[
            optimizer_record(
                f"/optimizers/{index}", item, state["optimizers"][index], names, checksums=checksums, known=written.storage_crc32c
            )
            for index, item in enumerate(optimizers)
        ] or None,
        scheduler=[
            scheduler_record(f"/schedulers/{index}", item, state["schedulers"][index]) for index, item in enumerate(schedulers)
        ] or None,
        scaler=scaler_record("/scaler", state["scaler"]) if "scaler" in state else None,
        ema=ema_record("/ema", ema, state["ema"], checksums=checksums) if "ema" in state else None,
        rng=rng_record("/rng", state["rng"]) if "rng" in state else None,
        data_position=data_position_record("/data_position", state["data_position"]) if "data_position" in state else None,
        fingerprint=fingerprint_record(
            "/fingerprint", state["fingerprint"], atol=fingerprint_rule.atol, rtol=fingerprint_rule.rtol
        ) if "fingerprint" in state else None,
    )


def _missing_position_fields(spec: Spec, position: Mapping[str, Any] | None) -> list[str]:
    if position is None:
        return []
    return [name for name in spec.components.data_position.fields if position.get(name) is None]


def _position_state(position: Stateful | Mapping[str, Any]) -> dict[str, Any]:
    return dict(position) if isinstance(position, Mapping) else dict(position.state_dict())


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
