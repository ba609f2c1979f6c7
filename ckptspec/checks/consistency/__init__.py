"""Consistency: the values inside the checkpoint agree with each other and with the manifest."""

from __future__ import annotations

from collections.abc import Iterator

from .._context import Context
from .._registry import Finding

# Importing a module registers its rules, and the catalogue lists rules in the order they register:
# keep these imports in code order (CKS301 first), not sorted by module name.
from ._loop import EpochProgressMismatch, GlobalStepMismatch, ProgressCounterInverted, check_lightning_counters
from ._optimizer import (
    OptimizerHyperparameterMismatch,
    OptimizerParamGroupsMismatch,
    OptimizerStateCountMismatch,
    OptimizerStateShapeMismatch,
    ParameterNotOptimized,
    ParamMapMismatch,
    check_optimizer,
    check_param_map,
)
from ._resume_state import (
    DataPositionMismatch,
    ScalerStateMismatch,
    SchedulerBehindLoop,
    SchedulerStateMismatch,
    SchedulerStepMismatch,
    check_data_position,
    check_scaler,
    check_scheduler,
)
from ._fingerprint import FingerprintDigestMismatch, FingerprintTensorMissing, check_fingerprint
from ._hyperparameters import HyperparameterMismatch, check_hyperparameters
from ._keras import KerasConfigMismatch, check_keras

__all__ = [
    "DataPositionMismatch",
    "EpochProgressMismatch",
    "FingerprintDigestMismatch",
    "FingerprintTensorMissing",
    "GlobalStepMismatch",
    "HyperparameterMismatch",
    "KerasConfigMismatch",
    "OptimizerHyperparameterMismatch",
    "OptimizerParamGroupsMismatch",
    "OptimizerStateCountMismatch",
    "OptimizerStateShapeMismatch",
    "ParamMapMismatch",
    "ParameterNotOptimized",
    "ProgressCounterInverted",
    "ScalerStateMismatch",
    "SchedulerBehindLoop",
    "SchedulerStateMismatch",
    "SchedulerStepMismatch",
    "check",
]


def check(ctx: Context) -> Iterator[Finding]:
    view = ctx.view
    if view is None:
        return
    if view.format == "lightning":
        yield from check_lightning_counters(ctx, view)
    if ctx.manifest is None:
        return
    manifest = ctx.manifest
    for index, optimizer in enumerate(manifest.components.optimizer or []):
        yield from check_optimizer(ctx, view, optimizer, ("components", "optimizer", index))
    yield from check_param_map(ctx, manifest)
    schedulers = manifest.components.scheduler or []
    for index, scheduler in enumerate(schedulers):
        yield from check_scheduler(ctx, view, scheduler, ("components", "scheduler", index), alone=len(schedulers) == 1)
    yield from check_scaler(ctx, view, manifest)
    yield from check_data_position(ctx, view, manifest)
    yield from check_fingerprint(ctx, view, manifest)
    yield from check_hyperparameters(ctx, view, manifest)
    yield from check_keras(ctx, view, manifest)
