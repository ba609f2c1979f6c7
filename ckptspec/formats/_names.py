"""The vocabulary every reader shares: magic bytes, file names and suffixes, the grammar of prefixes
and shards, and the kinds of checkpoint `detect` names. Nothing here reads a file's content."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from .._dataclass import dataclass
from .._sidecars import TRAINER_STATE
from .._storage import exists_or_link, is_directory

__all__ = [
    "ACCELERATE_RNG",
    "DCP_DATA_FILE",
    "DCP_METADATA",
    "DCP_PENDING_METADATA",
    "DCP_RANK_METADATA",
    "DEEPSPEED_SCRIPTS",
    "DEEPSPEED_LATEST",
    "DEEPSPEED_STATES_FILE",
    "HF_STORAGE_SHARD",
    "LIGHTNING_META",
    "LEGACY_TORCH_MAGIC",
    "SAFETENSORS_INDEX_SUFFIX",
    "STATE_FILE_NAME",
    "TF_DATA_SHARD",
    "TORCHSCRIPT_CONSTANTS",
    "ZIP_MAGIC",
    "DetectedCheckpoint",
    "Kind",
    "is_dcp_directory",
    "is_dcp_file",
    "is_deepspeed_directory",
    "is_deepspeed_file",
    "is_sharded_save_file",
    "prefix_file",
    "prefix_parts",
    "tf_prefix_of",
    "tf_shard_prefix",
    "training_directory_kind",
]


ZIP_MAGIC = b"PK\x03\x04"


LEGACY_TORCH_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")


SAFETENSORS_INDEX_SUFFIX = ".safetensors.index.json"


TF_DATA_SHARD = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
"""The end of a TensorFlow data shard's name, after the prefix: shard number and shard count."""


TORCHSCRIPT_CONSTANTS = "constants.pkl"
"""The record only a TorchScript archive (`torch.jit.save`) holds among torch zips."""
STATE_FILE_NAME = "checkpoint"
"""TensorFlow's state file, naming the latest checkpoint of its directory (read by `tf_state`)."""


Kind = Literal[
    "torch-zip", "tf-bundle", "pickle", "torch-legacy", "safetensors", "torchscript", "keras", "dcp", "dcp-hf", "deepspeed", "hf-trainer",
    "accelerate", "archive",
]


DEEPSPEED_LATEST = "latest"
"""The text file naming the tag directory of DeepSpeed's last finished save."""


DEEPSPEED_SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")
"""The scripts DeepSpeed copies into every save directory to gather the full weights: its own, no checkpoint."""

DEEPSPEED_STATES_FILE = re.compile(r"^.*_(?:model|optim)_states\.pt$")
"""One rank's file of a DeepSpeed save, inside its tag directory."""


DCP_METADATA = ".metadata"
LIGHTNING_META = "meta.pt"
"""What Lightning writes beside the DCP files of a sharded checkpoint: its loops, callbacks, epoch and step."""


DCP_PENDING_METADATA = ".metadata.tmp"


DCP_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
"""`__R.metadata`: rank R's own metadata, in a DCP save without collectives."""


DCP_DATA_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
"""`__R_I.distcp`: the I-th data file of rank R."""


HF_STORAGE_SHARD = re.compile(r"^shard-(\d{5,})-model-(\d{5,})-of-(\d{5,})\.safetensors$")
"""`shard-{R+1}-model-{K}-of-{N}.safetensors`: file K of rank R in DCP's Hugging Face storage layout."""


@dataclass(frozen=True)
class DetectedCheckpoint:
    kind: Kind
    path: Path
    """The torch file or bare pickle, the TF bundle prefix (without `.index`), or the DCP directory."""


def prefix_parts(prefix: Path) -> tuple[Path, str]:
    """The directory the files of TensorFlow checkpoint `prefix` are in, and the base name they start with.

    A prefix whose base name is empty (files `dir/.index`, `dir/.data-00000-of-00001`: what TF1
    `Saver` writes when told to save to `dir/`) is named by its directory, since a path cannot end in
    an empty name.
    """
    if is_directory(prefix) and not exists_or_link(prefix.with_name(f"{prefix.name}.index")):
        return prefix, ""
    return prefix.parent, prefix.name


def prefix_file(prefix: Path, suffix: str) -> Path:
    """The file of TensorFlow checkpoint `prefix` whose name ends in `suffix` (`.index`, `.data-...`)."""
    directory, name = prefix_parts(prefix)
    return directory / f"{name}{suffix}"


def _prefix_named(directory: Path, name: str) -> Path:
    return directory / name if name else directory


def tf_prefix_of(path: Path) -> Path | None:
    """The TensorFlow checkpoint prefix whose index or data shard `path` is named as, or None."""
    if path.name.endswith(".index"):
        return _prefix_named(path.parent, path.name[: -len(".index")])
    if (prefix := tf_shard_prefix(path.name)) is not None:
        return _prefix_named(path.parent, prefix)
    return None


def tf_shard_prefix(name: str) -> str | None:
    """The prefix of the TensorFlow checkpoint whose data shard is named `name`, or None for another file."""
    match = TF_DATA_SHARD.search(name)
    return name[: match.start()] if match is not None else None


def is_dcp_directory(names: Collection[str]) -> bool:
    """Whether a directory holding the files `names` is a torch.distributed.checkpoint (DCP) save,
    committed or not (Lightning's sharded checkpoints are DCP saves with a `meta.pt`), or one in
    its Hugging Face storage layout."""
    return any(is_dcp_file(name) or HF_STORAGE_SHARD.match(name) for name in names)


def is_dcp_file(name: str) -> bool:
    """Whether `name` is one of the files of DCP's own layout (metadata or `.distcp` data)."""
    return bool(name in (DCP_METADATA, DCP_PENDING_METADATA) or DCP_RANK_METADATA.match(name) or DCP_DATA_FILE.match(name))


def is_sharded_save_file(name: str) -> bool:
    """Whether `name` is a file a sharded save writes into its directory: DCP's, or Lightning's `meta.pt`."""
    return name == LIGHTNING_META or is_dcp_file(name)


def is_deepspeed_directory(names: Collection[str]) -> bool:
    """Whether a directory holding `names` is a DeepSpeed save directory (with `latest`) or one tag of it."""
    return any(is_deepspeed_file(name) for name in names)


def is_deepspeed_file(name: str) -> bool:
    """Whether `name` is one DeepSpeed writes into a save directory (`latest`) or a tag of it (a rank's states)."""
    return name == DEEPSPEED_LATEST or DEEPSPEED_STATES_FILE.match(name) is not None


ACCELERATE_RNG = re.compile(r"^random_states_(\d+)\.pkl$")
"""The file every `save_state` writes, one per process: it marks a directory as Accelerate's."""


def training_directory_kind(names: Collection[str]) -> Kind | None:
    """Whether a directory holding `names` is a Trainer checkpoint or an Accelerate `save_state`."""
    if TRAINER_STATE in names:
        return "hf-trainer"
    if any(ACCELERATE_RNG.match(name) for name in names):
        return "accelerate"
    return None
