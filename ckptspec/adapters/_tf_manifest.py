"""Build the manifest of a bundle TensorFlow has just written, from the bundle's own index and the live objects.

Tensor dtypes, shapes and CRC32Cs come from the index exactly as TensorFlow stored them (read by
`ckptspec.formats.tfbundle`, unmasked); what no bundle holds (layer constants, optimizer settings,
the schedule) comes from the live objects.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import keras
import tensorflow as tf

from .._dataclass import dataclass
from .._exceptions import AdapterError
from .._models import (
    ConfigRecord,
    DataPositionRecord,
    FileEntry,
    FingerprintRecord,
    Manifest,
    ManifestComponents,
    OptimizerRecord,
    ParamGroupRecord,
    ParamRef,
    RngGenerator,
    RngRecord,
    SchedulerRecord,
    Spec,
    TensorDigest,
    TensorEntry,
    TensorInventory,
)
from .._records import file_algorithms, file_entry, now_iso, producer, spec_ref
from .._crc32c import crc32c, crc32c_combine
from .._scan import Algorithm, FileDigests
from .._pointer import join_pointer
from ..formats.sstable import unmask_crc
from ..formats.tfbundle import Bundle, BundleEntry
from ._tf_config import describe_layers, optimizer_hyperparameters, qualified_name, schedule_config
from ._tf_graph import GraphMatch
from ._tf_rng import state_digest

__all__ = ["SavedState", "build_manifest", "key_pointer"]

Role = Literal["variable", "slot", "tensor"]


@dataclass(frozen=True)
class SavedState:
    """The live objects a checkpoint was saved from."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer | None
    generators: dict[str, tf.random.Generator]
    global_states: dict[str, tf.Variable]
    """Serialized Python / NumPy generator states, by generator name."""
    iterator: tf.data.Iterator | None
    step: tf.Variable
    epoch: tf.Variable
    batch_in_epoch: int | None
    fingerprint_inputs: list[tf.Variable]
    fingerprint_outputs: list[tf.Variable]


def key_pointer(key: str) -> str:
    """The JSON Pointer of a bundle key in the bundle seen as a flat key → tensor mapping."""
    return join_pointer([key])


def build_manifest(bundle: Bundle, match: GraphMatch, state: SavedState, spec: Spec | None) -> Manifest:
    base = bundle.prefix.parent
    return Manifest(
        format="tf-bundle",
        checkpoint=bundle.prefix.name,
        created=now_iso(),
        producer=producer({"tensorflow": tf.__version__, "keras": keras.__version__}),
        spec=spec_ref(spec) if spec is not None else None,
        files=_files(bundle, base, algorithms=file_algorithms(spec)),
        components=ManifestComponents(
            model=_inventory(bundle, _roles(match, state), checksums=_records_checksums(spec)),
            config=_config(state.model),
            optimizer=[_optimizer(match, state.optimizer, state.model)] if state.optimizer is not None else None,
            scheduler=_scheduler(match, state.optimizer) if state.optimizer is not None else None,
            rng=_rng(bundle, match, state) if state.generators or state.global_states else None,
            data_position=_data_position(match, state),
            fingerprint=_fingerprint(bundle, match, state, spec),
        ),
    )


def _records_checksums(spec: Spec | None) -> bool:
    return spec is None or spec.integrity.tensor_checksum == "crc32c"


def _files(bundle: Bundle, base: Path, *, algorithms: tuple[Algorithm, ...]) -> list[FileEntry]:
    """TensorFlow writes the files itself. A data shard's CRC32C is combined from the CRC32Cs
    TensorFlow took of its tensors' bytes as it wrote them, where they cover the shard from its
    first byte to its last; any other digest takes one read of the file, the files in parallel
    (reading and hashing release the GIL)."""
    paths = [bundle.index_path, *(bundle.shard_path(shard_id) for shard_id in range(bundle.header.num_shards))]
    sizes = {path: path.stat().st_size for path in paths}
    written = {shard_id: digests for shard_id in range(bundle.header.num_shards) if (digests := _written_digests(bundle, shard_id, sizes[paths[shard_id + 1]], algorithms))}

    def entry(index: int) -> FileEntry:
        return file_entry(paths[index], base, algorithms=algorithms, digests=written.get(index - 1), size=sizes[paths[index]])

    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(entry, range(len(paths))))


def _written_digests(bundle: Bundle, shard_id: int, size: int, algorithms: tuple[Algorithm, ...]) -> FileDigests | None:
    """The CRC32C of data shard `shard_id` (of `size` bytes) combined from its tensors' CRC32Cs when
    they lie end to end over the whole shard; None when another digest is asked for, or they do not.
    A string tensor's stored CRC32C covers its lengths in another form than the one written, so
    its bytes (lengths and strings, small as a rule) are read for theirs."""
    if algorithms != ("crc32c",):
        return None
    entries = sorted((entry for entry in bundle.entries.values() if entry.shard_id == shard_id and not entry.is_sliced), key=lambda entry: entry.offset)
    crc, end = 0, 0
    with open(bundle.shard_path(shard_id), "rb") as shard:
        for entry in entries:
            if entry.offset != end:
                return None
            if entry.dtype.name == "string":
                shard.seek(entry.offset)
                written = crc32c(shard.read(entry.size))
            else:
                written = unmask_crc(entry.crc32c)
            crc, end = crc32c_combine(crc, written, entry.size), end + entry.size
    return FileDigests(crc32c=f"{crc:08x}") if end == size and (entries or size == 0) else None


def _inventory(bundle: Bundle, roles: dict[str, Role], *, checksums: bool) -> TensorInventory:
    tensors = [
        _tensor_entry(entry, roles.get(entry.key, "tensor"), checksums=checksums) for entry in bundle.entries.values()
    ]
    return TensorInventory(at="", tensors=tensors)


def _roles(match: GraphMatch, state: SavedState) -> dict[str, Role]:
    """`variable` for the model's variables, `slot` for the optimizer's per-weight state, else `tensor`."""
    roles: dict[str, Role] = {}
    for variable in _optimizer_state(state.optimizer):
        roles.update(dict.fromkeys(match.keys_of(variable), "slot"))
    for variable in state.model.variables:
        roles.update(dict.fromkeys(match.keys_of(variable), "variable"))
    return roles


def _optimizer_state(optimizer: keras.optimizers.Optimizer | None) -> list[tf.Variable]:
    if optimizer is None:
        return []
    return [v for v in optimizer.variables if v is not optimizer.iterations and v.name != "learning_rate"]


def _tensor_entry(entry: BundleEntry, role: Role, *, checksums: bool) -> TensorEntry:
    crc = f"{unmask_crc(entry.crc32c):08x}" if checksums and not entry.is_sliced else None
    return TensorEntry(name=entry.key, dtype=entry.dtype.name, shape=list(entry.shape), crc32c=crc, role=role)


def _config(model: keras.Model) -> ConfigRecord:
    return ConfigRecord(modules=[layer.config for layer in describe_layers(model)])


def _single_key(match: GraphMatch, live: object, what: str) -> str:
    keys = match.keys_of(live)
    if len(keys) != 1:
        raise AdapterError(f"{what} should own exactly one key of the saved bundle, found {list(keys)}")
    return keys[0]


def _optimizer(match: GraphMatch, optimizer: keras.optimizers.Optimizer, model: keras.Model) -> OptimizerRecord:
    return OptimizerRecord(
        at=key_pointer(_single_key(match, optimizer.iterations, "optimizer.iterations")),
        type=qualified_name(type(optimizer)),
        param_groups=[
            ParamGroupRecord(
                hyperparameters=optimizer_hyperparameters(optimizer),
                params=_parameter_refs(match, model),
            )
        ],
        state_tensor_count=sum(len(match.keys_of(variable)) for variable in _optimizer_state(optimizer)),
    )


def _parameter_refs(match: GraphMatch, model: keras.Model) -> list[ParamRef]:
    """The weights an optimizer is built over, in order, named by their bundle keys."""
    return [
        ParamRef(index=index, name=_single_key(match, variable, variable.path), shape=list(variable.shape))
        for index, variable in enumerate(model.trainable_variables)
    ]


def _scheduler(match: GraphMatch, optimizer: keras.optimizers.Optimizer) -> list[SchedulerRecord] | None:
    schedule = schedule_config(optimizer)
    if schedule is None:
        return None
    schedule_type, schedule_state = schedule
    # A Keras schedule is code, not state: what the bundle holds of it is the step it is evaluated at.
    return [
        SchedulerRecord(
            at=key_pointer(_single_key(match, optimizer.iterations, "optimizer.iterations")),
            type=schedule_type,
            step=int(optimizer.iterations.numpy()),
            state=schedule_state,
        )
    ]


def _rng(bundle: Bundle, match: GraphMatch, state: SavedState) -> RngRecord:
    paths = bundle.object_graph.node_paths() if bundle.object_graph is not None else {}
    generators = []
    for name, generator in state.generators.items():
        key = _single_key(match, generator.state, f"generator {name!r}")
        node = match.node_by_object.get(id(generator))
        generators.append(
            RngGenerator(
                name=paths.get(node, name) if node is not None else name,
                at=key_pointer(key),
                sha256=hashlib.sha256(bundle.read_bytes(key)).hexdigest(),
            )
        )
    generators += [_global_generator(bundle, match, name, variable) for name, variable in state.global_states.items()]
    return RngRecord(generators=generators)


def _global_generator(bundle: Bundle, match: GraphMatch, name: str, variable: tf.Variable) -> RngGenerator:
    key = _single_key(match, variable, f"the {name} generator state")
    (serialized,) = bundle.decode(key)
    return RngGenerator(name=name, at=key_pointer(key), sha256=state_digest(serialized))


def _data_position(match: GraphMatch, state: SavedState) -> DataPositionRecord:
    position_owner: object = state.iterator if state.iterator is not None else state.epoch
    return DataPositionRecord(
        at=key_pointer(_single_key(match, position_owner, "the data position")),
        epoch=int(state.epoch.numpy()),
        global_step=int(state.step.numpy()),
        batch_in_epoch=state.batch_in_epoch,
    )


def _fingerprint(bundle: Bundle, match: GraphMatch, state: SavedState, spec: Spec | None) -> FingerprintRecord | None:
    if not state.fingerprint_inputs:
        return None
    rule = spec.components.fingerprint if spec is not None else None
    return FingerprintRecord(
        at="",
        inputs=[_digest(bundle, _single_key(match, v, "a fingerprint input")) for v in state.fingerprint_inputs],
        outputs=[_digest(bundle, _single_key(match, v, "a fingerprint output")) for v in state.fingerprint_outputs],
        atol=rule.atol if rule is not None else 0.0,
        rtol=rule.rtol if rule is not None else 0.0,
    )


def _digest(bundle: Bundle, key: str) -> TensorDigest:
    entry = bundle.entries[key]
    return TensorDigest(
        name=key,
        dtype=entry.dtype.name,
        shape=list(entry.shape),
        sha256=hashlib.sha256(bundle.read_bytes(key)).hexdigest(),
    )
