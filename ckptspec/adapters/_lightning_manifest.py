"""What a Lightning checkpoint holds, as its manifest records it: the model's tensors, the
construction config and hyper-parameters, each optimizer, scheduler and the scaler from the
Trainer's live objects and the saved dict, and the components the callback itself saves (generators,
data position, fingerprint, every rank's state) under its `state_key`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._models import ConfigRecord, FingerprintRule, Manifest, ManifestComponents, Spec
from .._pointer import join_pointer
from ._lightning_state import hyperparameters, ranks_record
from ._torch_config import module_configs, qualified_name
from ._torch_records import data_position_record, optimizer_record, parameter_names, scaler_record, scheduler_record, tensor_inventory, tensor_roles
from ._torch_replay import fingerprint_record, rng_record

__all__ = ["directory_components", "own_records", "saved_components"]


def saved_components(
    trainer: Any,
    module: Any,
    spec: Spec | None,
    checkpoint: Mapping[str, Any],
    own: Mapping[str, Any],
    written_crc32c: Mapping[tuple[int, int], str] | None,
) -> ManifestComponents:
    """The components of `checkpoint`, which `trainer` saved from `module`; `own` are the callback's
    own (`own_records`)."""
    names = parameter_names(module)
    scaler_key = type(trainer.precision_plugin).__qualname__
    checksums = spec is None or spec.integrity.tensor_checksum == "crc32c"
    return ManifestComponents(
        model=tensor_inventory(
            "/state_dict", checkpoint["state_dict"], tensor_roles(module), checksums=checksums, known=written_crc32c
        ),
        config=ConfigRecord(
            modules=module_configs(module), hyperparameters=hyperparameters(checkpoint.get("hyper_parameters", {}))
        ),
        optimizer=[
            optimizer_record(f"/optimizer_states/{index}", optimizer, state, names, checksums=checksums, known=written_crc32c)
            for index, (optimizer, state) in enumerate(zip(trainer.optimizers, checkpoint.get("optimizer_states", [])))
        ] or None,
        scheduler=[
            scheduler_record(f"/lr_schedulers/{index}", config.scheduler, state)
            for index, (config, state) in enumerate(zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])))
        ] or None,
        scaler=scaler_record(f"/{scaler_key}", checkpoint[scaler_key]) if "scale" in checkpoint.get(scaler_key, {}) else None,
        **own,
    )


def own_records(spec: Spec | None, state_key: str, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The components the callback saved into `checkpoint` under `state_key`, as the manifest records them."""
    ours = checkpoint.get("callbacks", {}).get(state_key, {})
    base = join_pointer(["callbacks", state_key])
    fingerprint_rule = spec.components.fingerprint if spec is not None else FingerprintRule()
    return {
        "rng": rng_record(f"{base}/rng", ours["rng"]) if "rng" in ours else None,
        "data_position": data_position_record(f"{base}/data_position", ours["data_position"]) if "data_position" in ours else None,
        "fingerprint": fingerprint_record(
            f"{base}/fingerprint", ours["fingerprint"], atol=fingerprint_rule.atol, rtol=fingerprint_rule.rtol
        ) if "fingerprint" in ours else None,
        "ranks": ranks_record(f"{base}/ranks", ours["ranks"]) if "ranks" in ours else None,
    }  # fmt: skip


def directory_components(read: Manifest, trainer: Any, module: Any, own: Mapping[str, Any]) -> tuple[ManifestComponents, list[str]]:
    """The components of a sharded directory, as adoption `read` them back, completed with what only
    the callback knows (`own`, the construction constants, the optimizers' classes); and what is
    still unknown."""
    hyperparameters = read.components.config.hyperparameters if read.components.config is not None else {}
    optimizers = [
        record.model_copy(update={"type": qualified_name(optimizer)})
        for record, optimizer in zip(read.components.optimizer or [], trainer.optimizers)
    ]
    components = read.components.model_copy(
        update={"config": ConfigRecord(modules=module_configs(module), hyperparameters=hyperparameters),
                "optimizer": optimizers or None, **own}
    )  # fmt: skip
    settled = {"config", "optimizer.type", *own}
    return components, [entry for entry in read.unknown if not settled & {entry.partition(":")[0], entry.partition(".")[0]}]
