"""The manifest of a Trainer `checkpoint-N/` or an Accelerate `save_state` directory, built from its files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._models import ConfigRecord, DataPositionRecord, FileEntry, Manifest, ManifestComponents, RngGenerator, RngRecord, TensorInventory
from ._pointer import escape_segment
from ._records import file_algorithms, file_entry
from ._views.base import MISSING
from ._manifests import TorchManifest, rng_generators
from ._pickled_config import hyperparameters_form
from .formats.deepspeed import deepspeed_places
from .formats.hf_training import TrainingFile, locate_training_directory

__all__ = ["TrainingManifest"]

_NOT_GENERATORS = ("step",)
"""Keys of Accelerate's `random_states_{i}.pkl` that are counters, not generator states."""
_ACCELERATE_GENERATORS = {"random_state": "python", "numpy_random_seed": "numpy", "torch_manual_seed": "torch", "torch_cuda_manual_seed": "cuda"}
"""Accelerate's keys for the generators, by the names the manifest gives them."""


class TrainingManifest(TorchManifest):
    def manifest(self) -> Manifest:
        manifest = super().manifest()
        # A Trainer checkpoint's manifest lies inside it (see `manifest_path_for`): it names its own directory.
        return manifest.model_copy(update={"checkpoint": "."}) if self.view.format == "hf-trainer" else manifest

    def files(self) -> list[FileEntry]:
        base = self.view.path if self.view.format == "hf-trainer" else self.view.path.parent
        algorithms = file_algorithms(self.spec)
        return [file_entry(path, base, algorithms=algorithms, digests=self.known.files.get(path)) for path in self.view.files]

    def frameworks(self) -> dict[str, str]:
        version = self.view.resolve("/config/transformers_version")
        return {"transformers": version} if isinstance(version, str) else {}

    def components(self) -> ManifestComponents:
        layout = locate_training_directory(self.view.path)
        by_component: dict[str, list[TrainingFile]] = {}
        for entry in [*layout.files, *layout.subdirectories]:
            by_component.setdefault(entry.component, []).append(entry)
        model = self._model(by_component.get("model", []))
        optimizers = self.optimizers(self._places(by_component, "optimizer", "optimizers"), model)
        schedulers = self.schedulers(self._places(by_component, "scheduler", "schedulers"))
        recorded = "; config.json is recorded as hyper-parameters" if self.view.resolve("/config") is not MISSING else ""
        self.unknown += [f"config.modules: construction constants live in the model's code{recorded}"]
        self.unknown += ["fingerprint"]
        return ManifestComponents(
            model=model,
            config=self._config(),
            optimizer=optimizers or None,
            scheduler=schedulers or None,
            scaler=self.scaler(["/" + escape_segment(entry.key) for entry in by_component.get("scaler", [])]),
            rng=self._rng(by_component.get("rng", [])),
            data_position=self._position(),
        )

    def _model(self, entries: list[TrainingFile]) -> TensorInventory | None:
        for entry in entries:
            prefix = "/" + escape_segment(entry.key)
            if entry.path.is_dir():
                tree = self.view.resolve(prefix)
                at = deepspeed_places(tree).model if isinstance(tree, Mapping) else None
                if at is not None:
                    return self.model(prefix + at)
            elif self.view.tensors_below(prefix):
                return self.model(prefix)
        return self.model(None)

    def _places(self, by_component: dict[str, list[TrainingFile]], component: str, deepspeed: str) -> list[str]:
        """Where each `component` lies: its files, or the DeepSpeed tag directory's places."""
        places = []
        for entry in [*by_component.get(component, []), *by_component.get("model", [])]:
            prefix = "/" + escape_segment(entry.key)
            if entry.component == component and not entry.path.is_dir():
                places.append(prefix)
            elif entry.path.is_dir() and isinstance(tree := self.view.resolve(prefix), Mapping):
                places += [prefix + at for at in getattr(deepspeed_places(tree), deepspeed)]
        return places

    def _rng(self, entries: list[TrainingFile]) -> RngRecord | None:
        """Every process's generators: `rng_state.pth`'s by name, each rank's file's under its key."""
        generators: list[RngGenerator] = []
        for entry in entries:
            at = "/" + escape_segment(entry.key)
            saved = self.view.resolve(at)
            if not isinstance(saved, Mapping):
                continue
            named = entry.key not in ("rng_state",)
            for key, state in saved.items():
                if str(key) in _NOT_GENERATORS:
                    continue
                name = _ACCELERATE_GENERATORS.get(str(key), str(key)) if self.view.format == "accelerate" else str(key)
                for generator in rng_generators(name, f"{at}/{escape_segment(str(key))}", state):
                    generators.append(RngGenerator(name=f"{entry.key}/{generator.name}", at=generator.at) if named else generator)
        if not generators:
            self.unknown.append("rng")
            return None
        return RngRecord(generators=[generator.model_copy(update={"sha256": self.state_digest(generator.at)}) for generator in generators])

    def _config(self) -> ConfigRecord | None:
        saved = self.view.resolve("/config")
        if not isinstance(saved, Mapping):
            return None
        form = hyperparameters_form()
        recorded = form.hyperparameters(saved, "config.hyperparameters")
        self.unknown += form.left_out
        return ConfigRecord(modules=[], hyperparameters=recorded)

    def _position(self) -> DataPositionRecord | None:
        state = self.view.resolve("/trainer_state")
        if not isinstance(state, Mapping):
            return None
        self.unknown.append("data_position.dataset_length: trainer_state.json does not record it")
        return DataPositionRecord(at="/trainer_state", global_step=_count(state.get("global_step")), epoch=_count(state.get("epoch")))


def _count(value: Any) -> int | None:
    """A non-negative whole count (a Trainer's `epoch` is fractional: the epochs begun before it, counted whole)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        return None
    return int(value)
