"""A typed view of a PyTorch Lightning `.ckpt` tree (as read by `torchzip`), without Lightning.

    with open_torch_checkpoint("epoch=1-step=8.ckpt") as checkpoint:
        ckpt = LightningCheckpoint.recognise(checkpoint.tree)
        ckpt.fit_progress.global_step, ckpt.callbacks["EarlyStopping{...}"].state, ckpt.scaler

Keys and counters follow Lightning 2.x `dump_checkpoint` and `loops/progress.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from .._dataclass import dataclass
from .._pointer import escape_segment
from ._tensors import TensorRef

__all__ = [
    "CallbackState",
    "FitProgress",
    "HyperParameters",
    "LightningCheckpoint",
    "OptimizerState",
    "PrecisionState",
    "Tracker",
]

VERSION_KEY = "pytorch-lightning_version"
_PRECISION_KEYS = ("MixedPrecision", "MixedPrecisionPlugin", "FSDPPrecision", "native_amp_scaling_state",
                   "amp_scaling_state")  # fmt: skip
_KNOWN_KEYS = frozenset(
    {
        "epoch", "global_step", VERSION_KEY, "legacy_pytorch-lightning_version", "state_dict", "loops",
        "callbacks", "optimizer_states", "lr_schedulers", "hparams_name", "hyper_parameters", "hparams_type",
        "datamodule_hparams_name", "datamodule_hyper_parameters", "datamodule_hparams_type", *_PRECISION_KEYS,
    }
)  # fmt: skip
_QUALNAME = re.compile(r"^[A-Za-z_]\w*(\.(<locals>|[A-Za-z_]\w*))*$")
_BATCH_PROGRESS = "epoch_loop.batch_progress"
_AUTOMATIC_STEPS = "epoch_loop.automatic_optimization.optim_progress"
_MANUAL_STEPS = "epoch_loop.manual_optimization.optim_step_progress"
_STEP_COUNTERS = {
    "automatic": f"{_AUTOMATIC_STEPS}.optimizer.step.total.completed",
    "manual": f"{_MANUAL_STEPS}.total.completed",
}


@dataclass(frozen=True)
class Tracker:
    """One Lightning progress tracker (`ready ≥ started ≥ processed ≥ completed` when consistent)."""

    ready: int
    completed: int
    started: int | None = None
    processed: int | None = None

    @classmethod
    def parse(cls, value: Any) -> Tracker | None:
        if not isinstance(value, Mapping) or not all(isinstance(value.get(k), int) for k in ("ready", "completed")):
            return None
        return cls(value["ready"], value["completed"], value.get("started"), value.get("processed"))


@dataclass(frozen=True)
class FitProgress:
    """Where training stood: `loops.fit_loop`, read as Lightning's trainer properties read it."""

    epoch: int | None
    """`epoch_progress.current.completed` (= `trainer.current_epoch`)."""
    global_step: int | None
    """Optimizer steps taken: automatic `optim_progress.optimizer.step.total.completed`, or manual
    `optim_step_progress.total.completed`, whichever counted steps (= `trainer.global_step`)."""
    optimization: Literal["automatic", "manual"] | None
    batch_in_epoch: int | None
    """`epoch_loop.batch_progress.current.completed`: batches finished in the current epoch."""
    is_last_batch: bool | None
    batch_tracker: Tracker | None

    @property
    def global_step_counter(self) -> str | None:
        """Where in `loops.fit_loop` `global_step` was read, dotted: the counter of `optimization`."""
        return _STEP_COUNTERS[self.optimization] if self.optimization is not None else None

    @classmethod
    def parse(cls, fit_loop: Mapping[str, Any]) -> FitProgress:
        epoch = _progress(fit_loop.get("epoch_progress"), "current")
        batch_current = _progress(fit_loop.get(_BATCH_PROGRESS), "current")
        automatic = _nested(fit_loop.get(_AUTOMATIC_STEPS), "optimizer", "step", "total")
        manual = _nested(fit_loop.get(_MANUAL_STEPS), "total")
        optimization, steps = _global_step(Tracker.parse(automatic), Tracker.parse(manual))
        batch_progress = fit_loop.get(_BATCH_PROGRESS)
        is_last = batch_progress.get("is_last_batch") if isinstance(batch_progress, Mapping) else None
        return cls(
            epoch=epoch.completed if epoch else None,
            global_step=steps,
            optimization=optimization,
            batch_in_epoch=batch_current.completed if batch_current else None,
            is_last_batch=is_last if isinstance(is_last, bool) else None,
            batch_tracker=batch_current,
        )


def _progress(progress: Any, which: str) -> Tracker | None:
    return Tracker.parse(progress.get(which)) if isinstance(progress, Mapping) else None


def _nested(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _global_step(
    automatic: Tracker | None, manual: Tracker | None
) -> tuple[Literal["automatic", "manual"] | None, int | None]:
    if manual is not None and manual.completed and not (automatic and automatic.completed):
        return "manual", manual.completed
    if automatic is not None:
        return "automatic", automatic.completed
    return None, None


@dataclass(frozen=True)
class OptimizerState:
    """One `optimizer.state_dict()`: per-parameter state keyed by the integer parameter id."""

    state: Mapping[Any, Mapping[str, Any]]
    param_groups: list[Mapping[str, Any]]

    @property
    def tensors(self) -> dict[tuple[Any, str], TensorRef]:
        """`(param_id, name)` → tensor, e.g. `(0, "exp_avg")`."""
        return {
            (param_id, name): value
            for param_id, entry in self.state.items()
            if isinstance(entry, Mapping)
            for name, value in entry.items()
            if isinstance(value, TensorRef)
        }

    @property
    def learning_rates(self) -> list[Any]:
        return [group.get("lr") for group in self.param_groups]


@dataclass(frozen=True)
class PrecisionState:
    """The precision plugin's saved state, usually a `GradScaler.state_dict()`."""

    key: str
    state: Mapping[str, Any]

    @property
    def scale(self) -> Any:
        return self.state.get("scale")


@dataclass(frozen=True)
class CallbackState:
    """A callback's `state_dict()`, under its `state_key` (`ModelCheckpoint{'monitor': ...}`)."""

    state_key: str
    state: Any

    @property
    def class_name(self) -> str:
        """The callback class's qualname: the state key up to its `{...}` options, if any."""
        return self.state_key.split("{", 1)[0]


@dataclass(frozen=True)
class HyperParameters:
    """`save_hyperparameters()` output for the module or the datamodule."""

    values: Any
    """A dict, an `argparse.Namespace` stand-in, or an OmegaConf `Stub` (never a failure)."""
    name: Any = None
    """`hparams_name`: `"kwargs"`, the init argument's name, or None."""
    container_type: Any = None
    """`hparams_type`: set only for OmegaConf containers (a class, so a `Stub` class here)."""


class LightningCheckpoint:
    """The parts of a Lightning checkpoint, typed. Missing parts are None or empty, never an error."""

    def __init__(self, tree: Mapping[str, Any]) -> None:
        self.tree = tree

    @classmethod
    def recognise(cls, tree: Any) -> LightningCheckpoint | None:
        """A view if `tree` is a Lightning checkpoint (has `pytorch-lightning_version`), else None."""
        if isinstance(tree, Mapping) and VERSION_KEY in tree:
            return cls(tree)
        return None

    @property
    def version(self) -> str:
        return str(self.tree[VERSION_KEY])

    @property
    def epoch(self) -> int | None:
        return _int_or_none(self.tree.get("epoch"))

    @property
    def global_step(self) -> int | None:
        return _int_or_none(self.tree.get("global_step"))

    @property
    def weights_only(self) -> bool:
        """Saved with `weights_only=True` (no optimizer, scheduler or callback state)."""
        return "optimizer_states" not in self.tree and "callbacks" not in self.tree

    @property
    def state_dict(self) -> Mapping[str, Any]:
        value = self.tree.get("state_dict")
        return value if isinstance(value, Mapping) else {}

    @property
    def optimizer_states(self) -> list[OptimizerState]:
        states = self.tree.get("optimizer_states")
        if not isinstance(states, list):
            return []
        return [
            OptimizerState(state=s.get("state", {}), param_groups=list(s.get("param_groups", [])))
            for s in states
            if isinstance(s, Mapping)
        ]

    @property
    def lr_schedulers(self) -> list[Mapping[str, Any]]:
        schedulers = self.tree.get("lr_schedulers")
        return [s for s in schedulers if isinstance(s, Mapping)] if isinstance(schedulers, list) else []

    @property
    def precision(self) -> PrecisionState | None:
        for key in _PRECISION_KEYS:
            if isinstance(self.tree.get(key), Mapping):
                return PrecisionState(key, self.tree[key])
        return None

    @property
    def scaler(self) -> Mapping[str, Any] | None:
        """The GradScaler state saved by 16-bit mixed precision, if any."""
        precision = self.precision
        return precision.state if precision is not None and "scale" in precision.state else None

    @property
    def callbacks(self) -> dict[str, CallbackState]:
        callbacks = self.tree.get("callbacks")
        if not isinstance(callbacks, Mapping):
            return {}
        return {str(key): CallbackState(str(key), state) for key, state in callbacks.items()}

    def callbacks_of(self, class_name: str) -> list[CallbackState]:
        """Every callback state of one class (`"ModelCheckpoint"`), whatever its options."""
        return [c for c in self.callbacks.values() if c.class_name == class_name]

    @property
    def loops(self) -> Mapping[str, Any]:
        loops = self.tree.get("loops")
        return loops if isinstance(loops, Mapping) else {}

    @property
    def fit_progress(self) -> FitProgress | None:
        fit_loop = self.loops.get("fit_loop")
        return FitProgress.parse(fit_loop) if isinstance(fit_loop, Mapping) else None

    @property
    def hyper_parameters(self) -> HyperParameters | None:
        return self._hyper_parameters("")

    @property
    def datamodule_hyper_parameters(self) -> HyperParameters | None:
        return self._hyper_parameters("datamodule_")

    @property
    def extra_states(self) -> dict[str, Any]:
        """Top-level keys Lightning itself does not write: the datamodule's `state_dict()` (keyed by its
        class qualname) and whatever `on_save_checkpoint` hooks added. The file does not say which is which."""
        return {key: value for key, value in self.tree.items() if key not in _KNOWN_KEYS}

    def datamodule_state(self, qualname: str | None = None) -> Any:
        """The datamodule's saved state: under `qualname` when given, else the one extra key that looks
        like a class qualname and holds a dict (None when there is none or more than one)."""
        if qualname is not None:
            return self.tree.get(qualname)
        candidates = [
            value
            for key, value in self.extra_states.items()
            if isinstance(key, str) and _QUALNAME.match(key) and isinstance(value, Mapping)
        ]
        return candidates[0] if len(candidates) == 1 else None

    def components(self) -> dict[str, str]:
        """ckptspec component → JSON Pointer, for the parts this checkpoint has."""
        found = {
            "model": "state_dict" in self.tree,
            "optimizer": "optimizer_states" in self.tree,
            "scheduler": "lr_schedulers" in self.tree,
            "data_position": isinstance(self.loops.get("fit_loop"), Mapping),
            "config": "hyper_parameters" in self.tree,
        }
        at = {
            "model": "/state_dict",
            "optimizer": "/optimizer_states",
            "scheduler": "/lr_schedulers",
            "data_position": "/loops/fit_loop",
            "config": "/hyper_parameters",
        }
        components = {name: at[name] for name, present in found.items() if present}
        if (precision := self.precision) is not None:
            components["scaler"] = "/" + escape_segment(precision.key)
        for callback in self.callbacks.values():
            if "EMA" in callback.class_name or "ExponentialMovingAverage" in callback.class_name:
                components["ema"] = "/callbacks/" + escape_segment(callback.state_key)
                break
        components.update(self._ckptspec_callback_components())
        return components

    def _ckptspec_callback_components(self) -> dict[str, str]:
        """What ckptspec's own callback adds: random generator states, data position and fingerprint."""
        found: dict[str, str] = {}
        for callback in self.callbacks_of("CkptspecCallback"):
            state = callback.state if isinstance(callback.state, Mapping) else {}
            base = "/callbacks/" + escape_segment(callback.state_key)
            found.update({name: f"{base}/{name}" for name in ("rng", "fingerprint") if name in state})
        return found

    def summary(self) -> dict[str, Any]:
        """Scalars for `Inspection.metadata`: version, epoch, global step, batch in epoch."""
        facts: dict[str, Any] = {"lightning_version": self.version, "epoch": self.epoch, "global_step": self.global_step}
        progress = self.fit_progress
        if progress is not None:
            facts["batch_in_epoch"] = progress.batch_in_epoch
            facts["optimization"] = progress.optimization
        facts["weights_only"] = self.weights_only
        return facts

    def _hyper_parameters(self, prefix: str) -> HyperParameters | None:
        if f"{prefix}hyper_parameters" not in self.tree:
            return None
        return HyperParameters(
            values=self.tree[f"{prefix}hyper_parameters"],
            name=self.tree.get(f"{prefix}hparams_name"),
            container_type=self.tree.get(f"{prefix}hparams_type"),
        )


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None
