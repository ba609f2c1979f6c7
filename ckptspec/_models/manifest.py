"""`kind: manifest` — what one checkpoint does contain. Written by adapters, never by hand.

Data only: the checks that read it live in `ckptspec.checks`. Every component records `at`, a JSON
Pointer to where it lives inside the checkpoint's object tree, so a reader can find it without the
code that wrote it.
"""

from typing import Annotated, Literal

from pydantic import Field

from .._document_values import SCHEMA_VERSION

from .common import (
    DType,
    FilePath,
    Hex8,
    JSONValue,
    Location,
    Scalar,
    SchemaVersionField,
    Sha256,
    StrictModel,
    empty_dict,
    empty_list,
)
from .spec import Spec

__all__ = [
    "ConfigRecord",
    "DataPositionRecord",
    "EmaRecord",
    "FileEntry",
    "FingerprintRecord",
    "LineageParent",
    "LineageRecord",
    "Manifest",
    "ManifestComponents",
    "ModuleConfig",
    "OptimizerRecord",
    "ParamGroupRecord",
    "ParamRef",
    "Producer",
    "ProgramRecord",
    "RankState",
    "RanksRecord",
    "Retention",
    "RngGenerator",
    "RngRecord",
    "ScalerRecord",
    "SchedulerRecord",
    "SpecRef",
    "TensorDigest",
    "TensorEntry",
    "TensorInventory",
    "UNKNOWN",
]

UNKNOWN = "unknown"
"""The `type` of an optimizer or scheduler whose class the writer could not know (an adopted checkpoint):
it matches any class, and a restore reports it as unrecorded."""

NonNegative = Annotated[int, Field(ge=0)]
Shape = Annotated[list[NonNegative], Field(description="Dimensions; [] for a scalar.")]


class FileEntry(StrictModel):
    path: FilePath = Field(description="Path relative to the manifest's directory, '/'-separated.")
    size: NonNegative = Field(description="Size in bytes.")
    sha256: Sha256 | None = Field(None, description="SHA-256 of the whole file, when the spec asks for it.")
    crc32c: Hex8 | None = Field(None, description="CRC32C of the whole file, when the spec asks for it.")


class Producer(StrictModel):
    ckptspec: str = Field(description="Version of ckptspec that wrote the manifest.")
    python: str | None = None
    frameworks: dict[str, str] = Field(default_factory=empty_dict, description="Framework name → version.")


class SpecRef(StrictModel):
    name: str
    sha256: Sha256 = Field(description="Digest of the spec's canonical JSON form.")
    document: Spec | None = Field(None, description="The spec itself, embedded so the manifest stands alone.")


class TensorEntry(StrictModel):
    name: str = Field(description="Key of the tensor inside the mapping at the component's `at`.")
    dtype: DType
    shape: Shape
    crc32c: Hex8 | None = Field(None, description="CRC32C of the tensor's bytes as stored (row-major, file byte order).")
    role: Literal["parameter", "buffer", "tensor", "variable", "slot"] = "tensor"


class TensorInventory(StrictModel):
    at: Location
    tensors: list[TensorEntry]
    keras_weights: dict[str, str] | None = Field(
        None,
        description="For the Keras model exported beside a TensorFlow checkpoint (`<prefix>.keras`): each of its "
        "weights, by path without the model's name and in the model's weight order, mapped to the key of the model "
        "tensor holding the same variable; replay loads the weights through it.",
    )


class ModuleConfig(StrictModel):
    path: str = Field(description="Module path inside the model ('' for the model itself).")
    type: str = Field(description="Qualified class name, e.g. 'torch.nn.modules.batchnorm.BatchNorm1d'.")
    constants: dict[str, Scalar | list[Scalar]] = Field(
        default_factory=empty_dict,
        description="Constructor constants that no state dict holds and that change what the module computes "
        "(eps, momentum, affine, p, ...); a restore with other values is refused.",
    )
    attributes: dict[str, Scalar | list[Scalar]] = Field(
        default_factory=empty_dict,
        description="Other public scalar attributes of the user's own modules (learning_rate, batch_size, ...): "
        "hyper-parameters, reported when they change at restore, never refused.",
    )


class ConfigRecord(StrictModel):
    modules: list[ModuleConfig]
    hyperparameters: dict[str, JSONValue] = Field(default_factory=empty_dict)


class ParamRef(StrictModel):
    index: NonNegative | str = Field(
        description="The optimizer's integer id of the parameter, or its name where the optimizer state is keyed by "
        "name (torch.distributed.checkpoint's `get_state_dict`, Lightning's ModelParallelStrategy)."
    )
    name: str | None = Field(
        None, description="The parameter's name in the model; absent when the writer could not know it (listed under `unknown:`)."
    )
    shape: Shape | None = Field(None, description="The parameter's shape; absent when the writer could not know it.")
    state_crc32c: Hex8 | None = Field(
        None,
        description="CRC32C of the optimizer's state for the parameter (its moments): `key=crc32c` of each state tensor "
        "but `step`, joined by `;` in key order; a resume compares the live state with it before the first step. Absent "
        "where the parameter holds no state, the spec asks for no tensor checksums, or the writer could not read the state.",
    )


class ParamGroupRecord(StrictModel):
    hyperparameters: dict[str, JSONValue]
    params: list[ParamRef]
    steps: list[NonNegative] | None = Field(
        None,
        description="The step counts the optimizer's state holds for the group (each parameter's `step` in torch's "
        "Adam family, the optimizer's `iterations` in TensorFlow), each distinct value once, in increasing order; "
        "absent where the state holds none (SGD, or an optimizer that has not stepped).",
    )


class OptimizerRecord(StrictModel):
    at: Location
    type: str
    param_groups: list[ParamGroupRecord]
    state_tensor_count: NonNegative = Field(description="Tensors held in the optimizer's per-parameter state.")


class SchedulerRecord(StrictModel):
    at: Location
    type: str
    step: int = Field(description="Steps taken (torch's last_epoch).")
    state: dict[str, JSONValue] = Field(default_factory=empty_dict, description="The scheduler's scalar state.")


class ScalerRecord(StrictModel):
    at: Location
    scale: float
    growth_tracker: NonNegative
    state: dict[str, JSONValue] = Field(default_factory=empty_dict)


class EmaRecord(StrictModel):
    at: Location
    type: str
    decay: float | None = None
    updates: NonNegative | None = None
    tensors: list[TensorEntry]


class RngGenerator(StrictModel):
    name: str = Field(description="'python', 'numpy', 'torch', 'cuda:<index>', or a TensorFlow object path.")
    at: Location
    sha256: Sha256 | None = Field(None, description="Digest of the saved state, to tell generators apart.")


class RngRecord(StrictModel):
    generators: list[RngGenerator]


class DataPositionRecord(StrictModel):
    at: Location | None = Field(None, description="Where the position is saved in the checkpoint.")
    epoch: NonNegative | None = None
    global_step: NonNegative | None = None
    batch_in_epoch: NonNegative | None = None
    samples_seen: NonNegative | None = None
    sampler_seed: int | None = None
    dataset_length: NonNegative | None = Field(None, description="Samples in one epoch of the saved run's data (since 1.2).")
    batch_size: NonNegative | None = Field(None, description="Samples per optimizer step, over every process (since 1.2).")


class RankState(StrictModel):
    """What one process of a multi-process run saved for itself alone."""

    rank: NonNegative
    rng: RngRecord | None = Field(None, description="This rank's random generators.")
    data_position: DataPositionRecord | None = Field(None, description="Where this rank's data stream stood.")


class RanksRecord(StrictModel):
    """The per-process state of a checkpoint saved by several processes (DDP ranks): a resume gives
    each rank back its own, and a checkpoint missing a rank's state cannot do so."""

    at: Location = Field(description="Where the list of every rank's state is saved, in rank order.")
    world_size: Annotated[int, Field(ge=1)] = Field(description="How many processes saved the checkpoint.")
    states: list[RankState] = Field(description="Every rank's state, in rank order.")


class TensorDigest(StrictModel):
    name: str
    dtype: DType
    shape: Shape
    sha256: Sha256


class FingerprintRecord(StrictModel):
    at: Location
    inputs: list[TensorDigest]
    outputs: list[TensorDigest]
    atol: float = Field(0.0, ge=0)
    rtol: float = Field(0.0, ge=0)


class ProgramRecord(StrictModel):
    """A TorchScript archive's program: the source files of its `code/` folder, which run when loaded."""

    files: list[str] = Field(description="The `code/` records, without the archive folder, in name order.")
    sha256: Sha256 = Field(description="SHA-256 over each code record's name, a NUL byte and its inflated bytes, in name order.")


class LineageParent(StrictModel):
    """The checkpoint a save continued from: the one its process resumed from, for the first save
    after a resume, else the previous save of the same process."""

    checkpoint: FilePath = Field(description="Its path relative to this manifest's directory, '/'-separated.")
    manifest_sha256: Sha256 | None = Field(
        None, description="SHA-256 of its manifest's bytes when this save was made: another manifest there now means it was replaced or edited."
    )
    state_sha256: Sha256 | None = Field(
        None,
        description="Its model's state digest (see `lineage`), which finds it under another name once its own was "
        "written again by the run (a `last.ckpt` saved at every checkpoint).",
    )
    run: str | None = Field(None, description="Its run's id: another run's for a fork.")
    sequence: NonNegative | None = Field(None, description="Its `lineage.sequence`.")
    resumed: bool = Field(False, description="This save's process resumed from it; else it was the previous save of the same process.")
    resumed_ns: NonNegative | None = Field(
        None,
        description="When this save's process resumed from it, in nanoseconds since the Unix epoch (the clock of file times): "
        "a checkpoint of the run written after that moment was no newer checkpoint to resume from.",
    )
    fork: bool = Field(False, description="The training code declared a fork: this save begins a new run from it.")
    attested: list[str] | None = Field(
        None,
        description="Where this save's process resumed from it: what the resume measured on the live objects before "
        "its first step and found as saved (`model`, `config`, `optimizer`, `scheduler`, `scaler`, `rng`, `fingerprint`, and "
        "`data_order` once the first batches matched those the run drew after the save); absent where nothing was measured.",
    )


class Retention(StrictModel):
    """Which checkpoints of its run the writer removes as it saves more: all but the newest, and
    all but the best by a metric. A checkpoint it removed between two it kept is no hole in the run."""

    newest: Annotated[int, Field(ge=1)] | None = Field(
        None, description="It keeps the newest this many (the Trainer's `save_total_limit`; `save_top_k` without a monitor)."
    )
    best: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="It keeps this many best by `metric`, however old (`save_top_k` with a monitor; the Trainer's best model "
        "with `metric_for_best_model`).",
    )
    metric: str | None = Field(None, description="What `best` ranks the checkpoints by.")


class LineageRecord(StrictModel):
    """Where the checkpoint stands in its run: the run's id, its parent, its place in the run."""

    run: str | None = Field(
        None, description="The run's id, made at the run's first save and carried across resumes; absent where the writer could not know it."
    )
    sequence: NonNegative | None = Field(None, description="How many saves of the run come before this one along its parents (0 for the run's first).")
    parent: LineageParent | None = Field(None, description="The checkpoint this one continued from; absent for a run's first save.")
    start_sha256: Sha256 | None = Field(
        None,
        description="The model's state digest when its process began training without resuming, where the adapter "
        "sees that moment (Lightning's fit start): a run begun from another run's weights shows that checkpoint's digest.",
    )
    parent_inferred: bool = Field(
        False,
        description="Nothing was recorded when the checkpoint was saved (an adopted checkpoint): its run and parent "
        "are inferred from the checkpoints' own counters and times when a run is judged.",
    )
    retention: Retention | None = Field(
        None, description="How the writer removes the run's checkpoints as it saves, where it does (absent: it keeps them all, or did not say)."
    )


class ManifestComponents(StrictModel):
    model: TensorInventory | None = None
    config: ConfigRecord | None = None
    optimizer: list[OptimizerRecord] | None = None
    scheduler: list[SchedulerRecord] | None = None
    scaler: ScalerRecord | None = None
    ema: EmaRecord | None = None
    rng: RngRecord | None = None
    data_position: DataPositionRecord | None = None
    fingerprint: FingerprintRecord | None = None
    program: ProgramRecord | None = None
    ranks: RanksRecord | None = None


class Manifest(StrictModel):
    """What one checkpoint contains, written beside it as `<checkpoint>.ckptspec.yaml`."""

    ckptspec: SchemaVersionField = SCHEMA_VERSION
    kind: Literal["manifest"] = "manifest"
    format: Literal[
        "torch", "lightning", "tf-bundle", "safetensors", "torchscript", "keras", "dcp", "deepspeed", "hf-trainer", "accelerate"
    ] = Field(
        description="`dcp`: a torch.distributed.checkpoint directory; `deepspeed`: a DeepSpeed tag directory "
        "(or the save directory whose `latest` names it). Lightning's sharded directories are `lightning`. "
        "`hf-trainer`: a Hugging Face Trainer `checkpoint-N/` directory (its manifest inside it, `checkpoint: .`); "
        "`accelerate`: an Accelerate `save_state` directory (since 1.2)."
    )
    checkpoint: FilePath = Field(
        description="The checkpoint file, TensorFlow prefix or sharded directory, relative to the manifest's directory.",
    )
    created: str = Field(description="When the checkpoint was saved, ISO 8601 with time zone.")
    producer: Producer
    spec: SpecRef | None = None
    files: list[FileEntry] = Field(default_factory=empty_list)
    components: ManifestComponents = Field(default_factory=ManifestComponents)
    lineage: LineageRecord | None = Field(
        None,
        description="The checkpoint's run and parent. A model's state digest is the SHA-256 of one line per model "
        "tensor in name order, `name NUL dtype NUL shape NUL crc32c` with the shape's sizes comma-separated.",
    )
    unknown: list[str] = Field(
        default_factory=empty_list,
        description="What the writer could not know (e.g. construction config of a checkpoint adopted after the fact).",
    )
