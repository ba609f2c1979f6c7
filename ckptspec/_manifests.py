"""The manifest of a checkpoint, built from its view: one builder per family of formats (torch
and Lightning, DeepSpeed, TensorFlow, Keras; the Hugging Face directories in `_adopt_hf`).
`adopt` picks the builder; nothing here writes a file."""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataclass import dataclass
from ._models import (
    ConfigRecord,
    DataPositionRecord,
    EmaRecord,
    FileEntry,
    Manifest,
    ManifestComponents,
    ModuleConfig,
    OptimizerRecord,
    ParamGroupRecord,
    ParamRef,
    ProgramRecord,
    RngGenerator,
    RngRecord,
    ScalerRecord,
    SchedulerRecord,
    Spec,
    TensorEntry,
    TensorInventory,
)
from ._pickled_config import hyperparameters_form, pickled_hyperparameters
from ._records import file_algorithms, file_entry, producer, spec_ref
from ._scan import FileDigests
from ._pointer import join_pointer, split_pointer
from ._views.base import MISSING, CheckpointView, TensorInfo
from .formats.dcp import SHARDED_SAVE_KEY, rank_key
from .formats.deepspeed import deepspeed_places
from .formats._tree import plain_components

if TYPE_CHECKING:
    from .formats.dcp import KnownSave

__all__ = [
    "DeepSpeedManifest",
    "KerasManifest",
    "KnownDigests",
    "ManifestBuilder",
    "TFManifest",
    "TorchManifest",
    "rng_generators",
]

_LIGHTNING_SCALER_KEYS = ("MixedPrecision", "MixedPrecisionPlugin", "native_amp_scaling_state")


_BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


_TF_ROLES = {"model_variable": "variable", "optimizer_slot": "slot", "optimizer_variable": "variable"}


_ATTRIBUTES = "/.ATTRIBUTES/"


_SHORT_FLOATS = {"float32": "<f", "float16": "<e"}
"""struct formats of the float dtypes whose stored values have a shorter decimal than their float64 form."""


@dataclass(frozen=True)
class KnownDigests:
    """Checksums computed and values held elsewhere (by the ranks that wrote a sharded checkpoint),
    used instead of reading the bytes again."""

    tensors: Mapping[str, str] = field(default_factory=dict)
    """Tensor pointer → CRC32C, 8 hex digits."""
    files: Mapping[Path, FileDigests] = field(default_factory=dict)
    """File → its digests (those the manifest records: see `file_algorithms`)."""
    dcp: KnownSave | None = None
    """What the ranks that wrote a DCP save hold of it: its committed metadata, its non-tensor values."""


class ManifestBuilder:
    def __init__(self, view: CheckpointView, spec: Spec | None, known: KnownDigests) -> None:
        self.view = view
        self.spec = spec
        self.known = known
        self.root_counters = False
        self.unknown: list[str] = []
        self.checksums = spec is None or spec.integrity.tensor_checksum == "crc32c"

    def manifest(self) -> Manifest:
        components = self.components()
        return Manifest(
            format=self.view.format,
            checkpoint=self.view.path.name,
            created=datetime.fromtimestamp(self.view.files[0].stat().st_mtime, timezone.utc).isoformat(timespec="seconds"),
            producer=producer(self.frameworks()),
            spec=spec_ref(self.spec) if self.spec is not None else None,
            files=self.files(),
            components=components,
            unknown=self.unknown,
        )

    def files(self) -> list[FileEntry]:
        algorithms = file_algorithms(self.spec)
        return [
            file_entry(path, self.view.path.parent, algorithms=algorithms, digests=self.known.files.get(path))
            for path in self.view.files
        ]

    def tensor_entry(self, name: str, tensor: TensorInfo, role: str = "tensor") -> TensorEntry:
        return TensorEntry(
            name=name,
            dtype=tensor.dtype,
            shape=list(tensor.shape),
            crc32c=(self.known.tensors.get(tensor.pointer) or tensor.crc32c()) if self.checksums else None,
            role=role,  # type: ignore[arg-type]
        )

    def frameworks(self) -> dict[str, str]:
        return {}

    def components(self) -> ManifestComponents:
        raise NotImplementedError


class TorchManifest(ManifestBuilder):
    def frameworks(self) -> dict[str, str]:
        version = self.view.resolve("/pytorch-lightning_version")
        return {"pytorch-lightning": version} if isinstance(version, str) else {}

    def components(self) -> ManifestComponents:
        lightning = self.view.format == "lightning"
        places = {} if lightning else plain_components(self.view.tree)
        model = self.model("/state_dict" if lightning else places.get("model"))
        optimizers = self.optimizers(self.list_at("/optimizer_states") if lightning else self.one_or_list(places.get("optimizer")), model)
        schedulers = self.schedulers(self.list_at("/lr_schedulers") if lightning else self.one_or_list(places.get("scheduler")))
        rng = self.rng(places["rng"] if "rng" in places else _sharded_rng(self.view.tree))  # "" is a whole-file component
        self.unknown += ["config.modules: construction constants live in the model's code, not in the file", "fingerprint"]
        scalers = [join_pointer([key]) for key in _LIGHTNING_SCALER_KEYS] if lightning else self.one_or_list(places.get("scaler"))
        return ManifestComponents(
            model=model,
            config=self.config("/hyper_parameters" if lightning else places.get("config")),
            optimizer=optimizers or None,
            scheduler=schedulers or None,
            scaler=self.scaler(scalers),
            ema=None if lightning else self.ema(places.get("ema")),
            rng=rng,
            data_position=self.lightning_position() if lightning else self.plain_position(),
            program=self.program(),
        )

    def program(self) -> ProgramRecord | None:
        """A TorchScript archive's code files and their digest; None for other checkpoints."""
        if self.view.program is None:
            return None
        return ProgramRecord(files=self.view.program.files, sha256=self.view.program.sha256)

    def list_at(self, pointer: str) -> list[str]:
        value = self.view.resolve(pointer)
        return [f"{pointer}/{index}" for index in range(len(value))] if isinstance(value, list) else []

    def one_or_list(self, pointer: str | None) -> list[str]:
        if pointer is None:
            return []
        return self.list_at(pointer) or [pointer]

    def model(self, at: str | None) -> TensorInventory | None:
        if at is None:
            self.unknown.append("model: no state dict found at a known key")
            return None
        tensors = [self.tensor_entry(name, tensor) for name, tensor in self.view.tensors_below(at).items()]
        self.unknown.append("model.roles: which tensors are parameters and which buffers")
        return TensorInventory(at=at, tensors=tensors)

    def optimizers(self, pointers: list[str], model: TensorInventory | None) -> list[OptimizerRecord]:
        records = []
        for at in pointers:
            groups = self.view.resolve(f"{at}/param_groups")
            if not isinstance(groups, list):
                continue
            count = sum(1 for key in self.view.tensors if key.startswith(f"{at}/state/"))
            names = self.parameter_names(at, groups, model)
            records.append(
                OptimizerRecord(
                    at=at, type="unknown", param_groups=[self.param_group(g, names, self.steps(at, g)) for g in groups], state_tensor_count=count
                )
            )
        if records:
            self.unknown.append("optimizer.type: the file holds the optimizer's state, not its class")
        return records

    def parameter_names(
        self, at: str, groups: list[Any], model: TensorInventory | None
    ) -> dict[int | str, tuple[str, list[int] | None]]:
        """Parameter id → (name, shape), inferred from the state dict's order (buffers left out by
        name), kept only when the count and every saved state shape agree."""
        ids = [pid for group in groups for pid in group.get("params", [])]
        if ids and all(isinstance(pid, str) for pid in ids):
            shapes = {t.name: t.shape for t in (model.tensors if model else [])}
            return {pid: (pid, shapes[pid]) if pid in shapes else (pid, None) for pid in ids}  # keyed by name already
        candidates = [t for t in (model.tensors if model else []) if not t.name.endswith(_BUFFER_SUFFIXES)]
        if len(candidates) == len(ids) and all(self.state_fits(at, pid, t.shape) for pid, t in zip(ids, candidates)):
            self.unknown.append("optimizer.param_names: inferred from the state dict's order")
            return {pid: (t.name, t.shape) for pid, t in zip(ids, candidates)}
        self.unknown.append("optimizer.param_names: cannot be inferred without the model (left out)")
        return {}

    def state_fits(self, at: str, param_id: int, shape: list[int]) -> bool:
        state = self.view.tensors_below(f"{at}/state/{param_id}")
        return all(list(t.shape) == shape for t in state.values() if t.shape)

    def param_group(
        self, group: Mapping[str, Any], names: dict[int | str, tuple[str, list[int] | None]], steps: list[int] | None = None
    ) -> ParamGroupRecord:
        params = [ParamRef(index=pid, name=names.get(pid, (None, None))[0], shape=names.get(pid, (None, None))[1]) for pid in group.get("params", [])]
        return ParamGroupRecord(hyperparameters=_scalars(group, skip=("params",)), params=params, steps=steps)

    def steps(self, at: str, group: Mapping[str, Any]) -> list[int] | None:
        """The step counts saved for a group's parameters (Adam's `step`: a one-element tensor read
        from its bytes, or a number)."""
        found = set()
        for pid in group.get("params", []):
            pointer = join_pointer([*split_pointer(at), "state", str(pid), "step"])
            tensor = self.view.tensors.get(pointer)
            value = tensor.scalar() if tensor is not None and tensor.read_scalar is not None else self.view.resolve(pointer)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                found.add(int(value))
        return sorted(found) or None

    def schedulers(self, pointers: list[str]) -> list[SchedulerRecord]:
        records = []
        for at in pointers:
            state = self.view.resolve(at)
            if isinstance(state, Mapping) and isinstance(state.get("last_epoch"), int):
                records.append(SchedulerRecord(at=at, type="unknown", step=state["last_epoch"], state=_scalars(state)))
        if records:
            self.unknown.append("scheduler.type: the file holds the scheduler's state, not its class")
        return records

    def scaler(self, pointers: list[str]) -> ScalerRecord | None:
        for at in pointers:
            state = self.view.resolve(at)
            if isinstance(state, Mapping) and isinstance(state.get("scale"), (int, float)):
                rest = _scalars(state, skip=("scale", "_growth_tracker"))
                return ScalerRecord(at=at, scale=float(state["scale"]), growth_tracker=int(state.get("_growth_tracker", 0)), state=rest)
        return None

    def ema(self, at: str | None) -> EmaRecord | None:
        """An averaged copy of the model's state dict (timm's `state_dict_ema`), recorded like the model."""
        tensors = self.view.tensors_below(at) if at is not None else {}
        if not tensors:
            return None
        self.unknown.append("ema.type: the file holds the averaged weights, not the class that kept them")
        return EmaRecord(at=at, type="unknown", tensors=[self.tensor_entry(name, tensor) for name, tensor in tensors.items()])

    def rng(self, at: str | None) -> RngRecord | None:
        """The generator states a plain torch.save holds: one torch state tensor, or a dict of them
        by device or library (`python`, `numpy`, `cpu`, `cuda`...)."""
        value = self.view.resolve(at) if at is not None else MISSING
        if isinstance(value, Mapping):
            generators = [g for key, state in value.items() for g in rng_generators(str(key), join_pointer([*split_pointer(at), str(key)]), state)]
        else:
            generators = [RngGenerator(name="torch", at=at)] if at is not None and at in self.view.tensors else []
        if not generators:
            self.unknown.append("rng")
        return RngRecord(generators=[g.model_copy(update={"sha256": self.state_digest(g.at)}) for g in generators]) if generators else None

    def state_digest(self, at: str) -> str | None:
        """A digest of a generator's saved state: of its tensors' bytes, to tell states apart
        (`ckptspec lineage` finds a generator seeded again by it)."""
        tensors = self.view.tensors_below(at) if at not in self.view.tensors else {at: self.view.tensors[at]}
        if not tensors or any(tensor.read_sha256 is None for tensor in tensors.values()):
            return None
        lines = "".join(f"{pointer}\0{tensor.sha256()}\n" for pointer, tensor in sorted(tensors.items()))
        return hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()

    def config(self, at: str | None) -> ConfigRecord | None:
        """The hyper-parameters saved at `at`: Lightning's, or a script's `args` / `config` (an
        `argparse.Namespace` as timm saves it, a dict, an OmegaConf DictConfig)."""
        hyperparameters = pickled_hyperparameters(self.view.resolve(at)) if at is not None else None
        if hyperparameters is None:
            return None
        form = hyperparameters_form()
        recorded = form.hyperparameters(hyperparameters, "config.hyperparameters")
        self.unknown += form.left_out
        return ConfigRecord(modules=[], hyperparameters=recorded)

    def plain_position(self) -> DataPositionRecord | None:
        """A plain torch.save dict's counters: under `data_position` (as `ckptspec.torch.save` keeps
        them), else its top-level `epoch`, `global_step` or `step`, as training scripts save them."""
        nested = self.view.resolve("/data_position")
        at, saved = ("/data_position", nested) if isinstance(nested, Mapping) else ("", self.view.tree)
        if not isinstance(saved, Mapping) or (at == "" and not self.root_counters):
            return None
        names = {"global_step": "global_step", "epoch": "epoch", "batch_in_epoch": "batch_in_epoch", "samples_seen": "samples_seen"}
        counters = {field: saved[key] for key, field in names.items() if _counter(saved.get(key))}
        if at == "" and "global_step" not in counters and _counter(saved.get("step")):
            counters["global_step"] = saved["step"]
        return DataPositionRecord(at=at or None, **counters) if counters else None

    def lightning_position(self) -> DataPositionRecord:
        fit_loop = self.view.resolve("/loops/fit_loop")
        current = fit_loop.get("epoch_loop.batch_progress", {}).get("current", {}) if isinstance(fit_loop, Mapping) else {}
        epoch, step = self.view.resolve("/epoch"), self.view.resolve("/global_step")
        return DataPositionRecord(
            at="/loops/fit_loop" if isinstance(fit_loop, Mapping) and fit_loop else None,
            epoch=epoch if isinstance(epoch, int) else None,
            global_step=step if isinstance(step, int) else None,
            batch_in_epoch=current.get("completed") if isinstance(current.get("completed"), int) else None,
        )


class DeepSpeedManifest(TorchManifest):
    def components(self) -> ManifestComponents:
        places = deepspeed_places(self.view.tree)
        model = self.model(places.model)
        optimizers = self.optimizers(places.optimizers, model)
        schedulers = self.schedulers(places.schedulers)
        self.unknown += ["config.modules: construction constants live in the model's code, not in the file", "rng", "fingerprint"]
        return ManifestComponents(model=model, optimizer=optimizers or None, scheduler=schedulers or None)


_RNG_NAMES = {"cpu": "torch", "cuda": "cuda:0"}
"""Generator names as the manifest writes them, for the keys that differ (a Trainer saves torch's as `cpu`)."""


def _sharded_rng(tree: Any) -> str | None:
    """Where a `save_sharded` checkpoint keeps rank 0's generator states (every rank saves its own,
    and restores it)."""
    saved = tree.get(SHARDED_SAVE_KEY) if isinstance(tree, Mapping) else None
    states = saved.get("rng") if isinstance(saved, Mapping) else None
    return join_pointer([SHARDED_SAVE_KEY, "rng", rank_key(0)]) if isinstance(states, Mapping) and rank_key(0) in states else None


def rng_generators(key: str, at: str, state: Any) -> list[RngGenerator]:
    """A saved generator state, one per device when it is a list of them (`cuda` of several GPUs)."""
    if isinstance(state, list) and key != "python":
        return [RngGenerator(name=f"{key}:{index}", at=f"{at}/{index}") for index in range(len(state))]
    return [RngGenerator(name=_RNG_NAMES.get(key, key), at=at)]


class TFManifest(ManifestBuilder):
    def components(self) -> ManifestComponents:
        view = self.view
        tensors = [self.tensor_entry(_key(p), t, _TF_ROLES.get(t.role or "", "tensor")) for p, t in view.tensors.items()]
        self.unknown += ["config.modules: construction constants live in the model's code, not in the bundle", "fingerprint"]
        return ManifestComponents(
            model=TensorInventory(at="", tensors=tensors),
            optimizer=self.optimizer(),
            rng=self.rng(),
            data_position=self.position(),
        )

    def by_role(self, *roles: str) -> dict[str, TensorInfo]:
        return {pointer: t for pointer, t in self.view.tensors.items() if t.role in roles}

    def optimizer(self) -> list[OptimizerRecord] | None:
        state = self.by_role("optimizer_slot", "optimizer_variable")
        anchors = self.by_role("optimizer_iterations") or state
        if not anchors:
            return None
        hyperparameters = {}
        for pointer, tensor in self.by_role("learning_rate").items():
            if tensor.read_scalar is not None:
                hyperparameters[_key(pointer).split(_ATTRIBUTES)[0].rsplit("/", 1)[-1].lstrip("_")] = _as_written(float(tensor.scalar()), tensor.dtype)
        self.unknown += ["optimizer.type: the bundle holds the optimizer's variables, not its class", "optimizer.param_names"]
        at = next(iter(anchors))
        group = ParamGroupRecord(hyperparameters=hyperparameters, params=[])
        return [OptimizerRecord(at=at, type="unknown", param_groups=[group], state_tensor_count=len(state))]

    def rng(self) -> RngRecord | None:
        generators = [RngGenerator(name=_key(p).split(_ATTRIBUTES)[0], at=p) for p in self.by_role("rng_state")]
        if not generators:
            self.unknown.append("rng")
        return RngRecord(generators=generators) if generators else None

    def position(self) -> DataPositionRecord | None:
        iterations = self.by_role("optimizer_iterations")
        for pointer, tensor in iterations.items():
            if tensor.read_scalar is not None:
                self.unknown.append("data_position.epoch")
                return DataPositionRecord(at=pointer, global_step=int(tensor.scalar()))
        self.unknown.append("data_position")
        return None


class KerasManifest(ManifestBuilder):
    def components(self) -> ManifestComponents:
        view = self.view
        tensors = [self.tensor_entry(_key(p), t, "variable") for p, t in view.tensors.items()]
        self.unknown += ["rng", "fingerprint", "data_position: a Keras file holds no epoch or step of its own"]
        return ManifestComponents(model=TensorInventory(at="", tensors=tensors), config=self.config(), optimizer=self.optimizer())

    def config(self) -> ConfigRecord | None:
        if self.view.layers is None:
            self.unknown.append("config.modules: a weights file holds no layer config")
            return None
        modules = [ModuleConfig(path=layer.path, type=layer.type, constants=layer.constants) for layer in self.view.layers]
        return ConfigRecord(modules=modules)

    def optimizer(self) -> list[OptimizerRecord] | None:
        state = [pointer for pointer, tensor in self.view.tensors.items() if tensor.component == "optimizer"]
        if not state:
            return None
        self.unknown += ["optimizer.type: the weights hold the optimizer's variables, not its class", "optimizer.param_names"]
        group = ParamGroupRecord(hyperparameters={}, params=[])
        return [OptimizerRecord(at=state[0], type="unknown", param_groups=[group], state_tensor_count=len(state))]


def _as_written(value: float, dtype: str) -> float:
    """The shortest decimal that `dtype` stores as `value`: the 0.01 a user wrote, not float32's 0.009999999776482582."""
    packing = _SHORT_FLOATS.get(dtype)
    if packing is None or not math.isfinite(value):
        return value
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.unpack(packing, struct.pack(packing, candidate))[0] == value:
            return candidate
    return value


def _key(pointer: str) -> str:
    """The bundle key or HDF5 path of a TensorFlow or Keras view's pointer (one reference token)."""
    (key,) = split_pointer(pointer)
    return key


def _scalars(state: Mapping[Any, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries a manifest can hold exactly: JSON scalars and lists of them."""
    return {str(k): _plain(v) for k, v in state.items() if str(k) not in skip and _plain(v) is not MISSING}


def _counter(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _plain(value: Any) -> Any:
    if _is_scalar(value):
        return value
    # One level only: a list shared through the pickle's memo at every level (a "billion laughs")
    # must cost its length, never the size of its expansion.
    if isinstance(value, (list, tuple)) and all(_is_scalar(item) for item in value):
        return list(value)
    return MISSING


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))
