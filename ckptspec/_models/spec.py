"""`kind: spec` — what every checkpoint of a project must contain. Authored by people."""

from typing import Annotated, Literal

from pydantic import Field, field_validator

from .._document_values import SCHEMA_VERSION, Requirement
from .._pickle_policy import exact_operator_globals, only_error

from .common import FilePath, SchemaVersionField, StrictModel, empty_list

__all__ = [
    "ComponentRules",
    "ConfigRule",
    "DataPositionRule",
    "EmaRule",
    "FingerprintRule",
    "Integrity",
    "ModelRule",
    "OptimizerRule",
    "PicklePolicy",
    "Requirement",
    "RngRule",
    "Rule",
    "SchedulerRule",
    "SignaturePolicy",
    "Spec",
    "TrainingStateRule",
]

Pattern = Annotated[str, Field(min_length=1, description="A glob pattern (fnmatch syntax).")]


class Rule(StrictModel):
    """A component's requirement; subclasses add the options that component has."""

    require: Requirement = Field(
        Requirement.required,
        description="required: must be saved and restored; optional: checked when present; forbidden: must be absent.",
    )


class ModelRule(Rule):
    allow_missing: list[Pattern] = Field(
        default_factory=empty_list,
        description="Tensor names that a restore may leave at their fresh values (e.g. a new head when fine-tuning).",
    )
    allow_unexpected: list[Pattern] = Field(
        default_factory=empty_list,
        description="Saved tensor names that a restore may ignore.",
    )


class ConfigRule(Rule):
    ignore: list[Pattern] = Field(
        default_factory=empty_list,
        description="Constants, as '<module path>.<name>', that may differ at restore (e.g. '*.dropout.p').",
    )


class TrainingStateRule(Rule):
    """A component that carries the training on: leaving it out of a resume changes the run."""

    on_resume: Literal["restore", "may_drop"] = Field(
        "restore",
        description="restore: whenever the checkpoint holds it, a resume must restore it (optional only lets a "
        "checkpoint lack it); may_drop: a resume may leave it out on purpose, and the restore report lists it.",
    )


class OptimizerRule(TrainingStateRule):
    type: str | None = Field(None, description="Expected optimizer class name, e.g. 'AdamW'.")
    overridable: list[str] = Field(
        default_factory=lambda: ["lr"],
        description="Hyperparameters that a restore may change on purpose; the change is applied after loading.",
    )


class SchedulerRule(TrainingStateRule):
    type: str | None = Field(None, description="Expected scheduler class name, e.g. 'CosineAnnealingLR'.")


class EmaRule(TrainingStateRule):
    pass


class RngRule(Rule):
    generators: list[Literal["python", "numpy", "torch", "cuda", "tensorflow"]] = Field(
        default_factory=lambda: ["python", "numpy", "torch"],
        description="Generators whose state must be saved and restored ('cuda' is checked only where CUDA runs).",
    )


class DataPositionRule(Rule):
    fields: list[Literal["epoch", "global_step", "batch_in_epoch", "samples_seen", "sampler_seed", "dataset_length", "batch_size"]] = Field(
        default_factory=lambda: ["epoch", "global_step"],
        description="Fields of the data position that must be recorded.",
    )
    on_resume: Literal["restore", "may_change"] = Field(
        "restore",
        description="restore: a resume must continue on the same data (dataset length, batch size, processes); "
        "may_change: it may resume on other data on purpose (since 1.2).",
    )
    next_batches: int = Field(
        4,
        ge=0,
        le=64,
        description="How many batches drawn after each save are digested beside the checkpoint, and checked "
        "against the first ones a resume from it draws, where the adapter sees the batches; 0 turns it off (since 1.2).",
    )


class FingerprintRule(Rule):
    atol: float = Field(0.0, ge=0, description="Absolute tolerance when replaying the fixed batch.")
    rtol: float = Field(0.0, ge=0, description="Relative tolerance when replaying the fixed batch.")


class ComponentRules(StrictModel):
    """One rule per component; an absent component gets its default rule."""

    model: ModelRule = Field(default_factory=ModelRule, description="Every tensor of the model (required).")
    config: ConfigRule = Field(
        default_factory=ConfigRule, description="Constructor constants no state dict holds (required)."
    )
    optimizer: OptimizerRule = Field(
        default_factory=OptimizerRule, description="Optimizer state and hyperparameters (required)."
    )
    scheduler: SchedulerRule = Field(
        default_factory=lambda: SchedulerRule(require=Requirement.optional),
        description="Learning-rate scheduler state (optional).",
    )
    scaler: TrainingStateRule = Field(
        default_factory=lambda: TrainingStateRule(require=Requirement.optional),
        description="AMP loss-scaler state (optional).",
    )
    ema: EmaRule = Field(
        default_factory=lambda: EmaRule(require=Requirement.optional),
        description="Exponential moving average of the weights (optional).",
    )
    rng: RngRule = Field(default_factory=RngRule, description="Random generator states (required).")
    data_position: DataPositionRule = Field(
        default_factory=DataPositionRule, description="Where in the data the run was (required)."
    )
    fingerprint: FingerprintRule = Field(
        default_factory=FingerprintRule, description="Outputs of one fixed batch, replayed at restore (required)."
    )


class Integrity(StrictModel):
    tensor_checksum: Literal["crc32c", "none"] = Field(
        "crc32c", description="Per-tensor checksum recorded in manifests and verified against the files."
    )
    file_digest: Literal["crc32c", "sha256", "none"] = Field(
        "sha256",
        description=(
            "Whole-file digest recorded in manifests and verified against the files: crc32c (as fast as "
            "reading the bytes; catches damage) or sha256 (a content address for registries and signatures)."
        ),
    )


class PicklePolicy(StrictModel):
    """Which pickle globals are accepted beyond ckptspec's allow-list. Honoured only in the operator's
    spec (`--spec`); a spec embedded in a manifest can narrow `allow`, never widen it."""

    unknown_globals: Literal["error"] = Field(
        "error",
        description="A global off the built-in allow-list and `allow` is always an error (`warning` and `allow` are refused).",
    )
    allow: list[str] = Field(
        default_factory=empty_list,
        description="Globals trusted beyond the built-in allow-list, each named exactly as 'module.name', e.g. "
        "'myproject.config.TrainConfig'. Patterns, __dunder__ attributes and modules that hold code-running "
        "globals (os, builtins, pickle, torch.fx, ...) are refused.",
    )

    _only_error = field_validator("unknown_globals", mode="before")(only_error)
    _exact_globals = field_validator("allow")(exact_operator_globals)


class SignaturePolicy(StrictModel):
    """Who must have signed a checkpoint and its manifest. Only the operator's spec names trusted
    signers: the trusted keys and certificates of a spec embedded in a manifest are never used."""

    require: bool = Field(False, description="Every checkpoint must carry a signature (`<checkpoint>.sig`) by a trusted signer.")
    trusted_keys: list[FilePath] = Field(
        default_factory=empty_list,
        description="PEM files of the elliptic-curve public keys whose signatures are trusted; relative paths start at the spec's directory.",
    )
    trusted_certificates: list[FilePath] = Field(
        default_factory=empty_list,
        description="PEM files of the certificate chain a signing certificate must lead to; relative paths start at the spec's directory.",
    )


class Spec(StrictModel):
    """What every checkpoint of a project must contain."""

    ckptspec: SchemaVersionField = SCHEMA_VERSION
    kind: Literal["spec"] = "spec"
    name: str = Field(min_length=1, description="Project or model family the spec is for.")
    description: str | None = None
    framework: Literal["torch", "lightning", "tensorflow"] | None = Field(
        None, description="The framework whose checkpoints this spec covers; any when absent."
    )
    components: ComponentRules = Field(default_factory=ComponentRules, description="What each component must be.")
    integrity: Integrity = Field(default_factory=Integrity, description="Checksums recorded and verified.")
    pickle: PicklePolicy = Field(default_factory=PicklePolicy, description="What pickle globals are accepted.")
    signature: SignaturePolicy = Field(
        default_factory=SignaturePolicy, description="Whether checkpoints must be signed, and by whom."
    )
