"""Rules for sharded checkpoints written by many ranks (torch.distributed.checkpoint directories,
Lightning's sharded strategies, DeepSpeed). Their reader lists what it finds as problems; `SHARD_PROBLEM_RULES`
names the rule that reports each kind."""

from __future__ import annotations

from ._registry import Preview, Rule, declare
from .inputs import CouldNotCheck

__all__ = [
    "SHARD_PROBLEM_RULES",
    "DeepSpeedLatestTagMissing",
    "DeepSpeedRankFileMissing",
    "ShardChunksNotTiled",
    "ShardFileUnreferenced",
    "ShardSliceCorrupt",
    "ShardSliceMissing",
    "ShardSliceTruncated",
    "ShardedOptimizerKeyedByIndex",
    "ShardedSaveUncommitted",
]

_SINCE = Preview("0.2.0")


@declare("CKS236", "sharded-save-uncommitted", family="integrity", severity="error", lifecycle=_SINCE)
class ShardedSaveUncommitted:
    """## What it does
    Checks that a torch.distributed.checkpoint (DCP) directory was committed. Its `.metadata` (or,
    for a save without collectives, every writing rank's `__R.metadata`) must exist, and no
    `.metadata.tmp` may be left over.

    ## Why is this bad?
    DCP writes the metadata last, as `.metadata.tmp` renamed into place: without it the data files
    of the ranks cannot be restored, and a left-over `.metadata.tmp` beside an older `.metadata`
    means a later save into the same directory stopped half way, mixing the files of two saves.
    An upload that was cut off looks just like this.

    ## Example
    `ckpt/`: `__0_0.distcp`, `__1_0.distcp` and no `.metadata`.

    ## How to fix
    Use the previous checkpoint, and save into a fresh directory each time.
    """


@declare("CKS237", "shard-chunks-not-tiled", family="integrity", severity="error", lifecycle=_SINCE)
class ShardChunksNotTiled:
    """## What it does
    Checks that the chunks the metadata records for each tensor cover it exactly once: every chunk
    lies inside the tensor's global shape, no two chunks overlap, and together they hold all its
    elements.

    ## Why is this bad?
    A gap is part of the tensor that no rank saved: loading leaves those elements as whatever the
    model was initialised with. Overlapping chunks hold the same elements twice, and which copy
    wins depends on the load order. Both load without an error.

    ## Example
    `model.layer.weight: chunks at [0, 0] and [2, 0] overlap`.

    ## How to fix
    The save was produced by a broken planner or edited afterwards: use another checkpoint.
    """


@declare("CKS238", "shard-slice-missing", family="integrity", severity="error", lifecycle=_SINCE)
class ShardSliceMissing:
    """## What it does
    Checks that every file the metadata names for a tensor chunk or value exists in the directory
    (and that every chunk has a file recorded at all).

    ## Why is this bad?
    The rank that wrote the missing file took its part of the model with it: the checkpoint cannot
    be restored, on any number of ranks.

    ## Example
    `model.layer.weight: chunk at [4, 0]: rank 1 file __1_0.distcp bytes 0..1577: the file is missing`.

    ## How to fix
    Copy the missing file from the source of the checkpoint, or use another checkpoint.
    """


@declare("CKS239", "shard-slice-truncated", family="integrity", severity="error", lifecycle=_SINCE)
class ShardSliceTruncated:
    """## What it does
    Checks that every byte range the metadata records (offset and length in a data file) lies inside
    the file.

    ## Why is this bad?
    The file was cut short (an interrupted copy or upload): the chunks past its end cannot be read.

    ## Example
    `model.layer.weight: chunk at [0, 0]: rank 0 file __0_0.distcp bytes 3783..5360: the file has only 4000 bytes`.

    ## How to fix
    Copy the file again from the source, or use another checkpoint.
    """


@declare("CKS240", "shard-slice-corrupt", family="integrity", severity="error", lifecycle=_SINCE)
class ShardSliceCorrupt:
    """## What it does
    Reads every slice of the data files: each must be a complete torch.save archive holding a tensor
    of the dtype and chunk shape the metadata records.

    ## Why is this bad?
    torch loads each slice separately; a damaged one fails the restore on the rank that needs it, or
    loads a tensor that is not the chunk the metadata promises.

    ## Example
    `model.layer.weight: rank 1 file __1_0.distcp bytes 0..1577: holds a float16 tensor of shape [2, 3],
    the metadata says float32 [2, 3]`.

    ## How to fix
    Use another checkpoint: the data files and the metadata do not come from the same save.
    """


@declare("CKS241", "shard-file-unreferenced", family="integrity", severity="warning", lifecycle=_SINCE)
class ShardFileUnreferenced:
    """## What it does
    Reports data files (`__R_I.distcp`) in the directory that the metadata does not name.

    ## Why is this bad?
    They come from another save into the same directory (for example with more ranks): the directory
    mixes two saves, and the stray files waste space and confuse anyone copying the checkpoint.

    ## Example
    `__3_0.distcp is not named by the metadata` in a directory saved by ranks 0 and 1.

    ## How to fix
    Save each checkpoint into a fresh directory; delete the stray files after checking they are not needed.
    """


@declare("CKS242", "sharded-optimizer-keyed-by-index", family="integrity", severity="info", lifecycle=_SINCE)
class ShardedOptimizerKeyedByIndex:
    """## What it does
    Records that a sharded checkpoint's optimizer state is keyed by parameter index
    (`optimizer.state_dict()`), not by parameter name (`torch.distributed.checkpoint.state_dict.get_state_dict`).

    ## Why is this bad?
    Index-keyed state is matched to parameters by their order only: after a change to the model, or
    when resharding with another wrapping, each state can land on another parameter without an error.

    ## Example
    `/optim: optimizer state is keyed by parameter index (e.g. optim.state.0.exp_avg)`.

    ## How to fix
    Save the optimizer with `get_state_dict(model, optimizer)`, which keys its state by name.
    """


@declare("CKS243", "deepspeed-latest-tag-missing", family="integrity", severity="error", lifecycle=_SINCE)
class DeepSpeedLatestTagMissing:
    """## What it does
    Checks that the tag a DeepSpeed save directory's `latest` file names is a directory beside it.

    ## Why is this bad?
    `load_checkpoint(save_dir)` follows `latest`: when its tag is missing (an interrupted save, a
    partial copy or upload) the resume fails, or a script that falls back to a fresh start silently
    trains from scratch.

    ## Example
    `latest` holds `global_step1200`, and `save_dir/global_step1200/` does not exist.

    ## How to fix
    Copy the tag directory, or point `latest` at the last complete tag.
    """


@declare("CKS244", "deepspeed-rank-file-missing", family="integrity", severity="error", lifecycle=_SINCE)
class DeepSpeedRankFileMissing:
    """## What it does
    Checks that a DeepSpeed tag directory holds every rank file its model states record.

    A ZeRO optimizer file per data-parallel rank (`dp_world_size`); with ZeRO-3 a model states file
    per data-parallel rank too, otherwise one per model-parallel rank (`mp_world_size`). The ZeRO
    stage comes from the saved `ds_config`, or from the files present.

    ## Why is this bad?
    Each ZeRO file holds one rank's partition of the optimizer state and fp32 master weights (with
    ZeRO-3, of the weights themselves): without it, `load_checkpoint` and `zero_to_fp32` fail, or the
    state of those parameters is lost.

    ## Example
    `dp_world_size: 4`, with `zero_pp_rank_2_mp_rank_00_optim_states.pt` missing.

    ## How to fix
    Copy the missing file from the source of the checkpoint, or use another checkpoint.
    """


SHARD_PROBLEM_RULES: dict[str, Rule] = {
    "latest-tag-missing": DeepSpeedLatestTagMissing,
    "rank-file-missing": DeepSpeedRankFileMissing,
    "uncommitted-save": ShardedSaveUncommitted,
    "tensor-not-tiled": ShardChunksNotTiled,
    "slice-missing": ShardSliceMissing,
    "slice-out-of-range": ShardSliceTruncated,
    "slice-corrupt": ShardSliceCorrupt,
    "unreferenced-shard": ShardFileUnreferenced,
    "optimizer-keyed-by-index": ShardedOptimizerKeyedByIndex,
    "metadata-version-unknown": CouldNotCheck,
    "slice-transformed": CouldNotCheck,
}
"""The rule for each kind of problem the DCP reader lists (the others are integrity's general ones)."""
