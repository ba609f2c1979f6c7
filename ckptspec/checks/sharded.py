"""Rules for sharded checkpoints written by many ranks (torch.distributed.checkpoint directories,
Lightning's sharded strategies, DeepSpeed). Their reader lists what it finds as problems; `SHARD_PROBLEM_RULES`
names the rule that reports each kind. `check_rank_states` checks the per-rank state (generators, data
position) a manifest records of a checkpoint that several processes saved."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from ._context import Context
from ._registry import Finding, Preview, Rule, declare
from .._views.base import MISSING, CheckpointView
from .inputs import CouldNotCheck

if TYPE_CHECKING:
    from .._models import Manifest, RankState, RanksRecord

__all__ = [
    "SHARD_PROBLEM_RULES",
    "DeepSpeedLatestTagMissing",
    "DeepSpeedRankFileMissing",
    "RankGeneratorsCopied",
    "RankStateMissing",
    "ShardChunksNotTiled",
    "ShardFileUnreferenced",
    "ShardSliceCorrupt",
    "ShardSliceMissing",
    "ShardSliceTruncated",
    "ShardedOptimizerKeyedByIndex",
    "ShardedSaveUncommitted",
    "check_rank_states",
    "ShardedSaveUnfinished",
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
    elements. Chunks stacked across each other along every dimension, which no DCP writer lays out,
    are reported as not shown to be free of overlaps: comparing every pair of them would take time
    that grows with the square of their count.

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
    Reports data files (`__R_I.distcp`) in the directory that the metadata does not name, and, in
    DCP's Hugging Face storage layout, safetensors files not named as its shards.

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


@declare("CKS247", "rank-state-missing", family="integrity", severity="error", lifecycle=_SINCE)
class RankStateMissing:
    """## What it does
    Checks that a checkpoint saved by several processes (DDP ranks) holds the state of every rank.

    The manifest records the world size and each rank's random generators and data position; the
    checkpoint must hold an entry for each rank, with everything the manifest records of it.

    ## Why is this bad?
    Each rank draws its own dropout masks and augmentations. A resume that finds no state for a
    rank fails, or gives that rank fresh generators or another rank's (then two ranks draw the same
    numbers): the resumed run silently stops being the one that was saved.

    ## Example
    The manifest records `world_size: 2`; `callbacks/CkptspecCallback/ranks` in the file holds one entry.

    ## How to fix
    Use another checkpoint: the state of a missing rank cannot be recreated. Save with every rank
    taking part (the Lightning callback gathers each rank's state at every save).
    """


@declare("CKS248", "rank-generators-copied", family="integrity", severity="error", lifecycle=_SINCE)
class RankGeneratorsCopied:
    """## What it does
    Checks that no two ranks of a multi-process checkpoint hold the same random generator state
    where the manifest recorded different states for them when they were saved.

    ## Why is this bad?
    A resume restores each rank's generators from its entry. When one rank's entry holds another
    rank's state (restored from the wrong rank, or copied when the checkpoint was edited), both
    ranks draw the same dropout masks and augmentations from then on, and nothing fails.

    ## Example
    `callbacks/CkptspecCallback/ranks/1/rng/torch` holds the same bytes as `ranks/0/rng/torch`; the
    manifest recorded two different digests.

    ## How to fix
    Use another checkpoint, or one saved again from the running job: the lost rank's state cannot
    be recreated.
    """


_NAMED_RANKS = 3


@declare("CKS245", "sharded-save-unfinished", family="integrity", severity="error", lifecycle=_SINCE)
class ShardedSaveUnfinished:
    """## What it does
    Checks that a DCP directory written by ckptspec's sharded save has its manifest beside it.
    Such a directory is known by the `ckptspec` entries in its metadata: the world size and each
    rank's generators, which `save_sharded` and `async_save_sharded` add.

    ## Why is this bad?
    Those functions write the manifest last, after every rank has written its files and
    `.metadata` is committed, and remove an earlier manifest before any rank writes: the manifest
    is what marks the save finished. Without it the save failed or was cut off after it started.
    A failed save into a directory that already held a checkpoint leaves the old `.metadata`
    beside data files some ranks rewrote: the chunks can still read cleanly while coming from two
    different steps.

    ## Example
    `ckpt/` with `.metadata` holding `ckptspec.world_size`, and no `ckpt.ckptspec.yaml`.

    ## How to fix
    Use the previous checkpoint, and save again. Adoption (`ckptspec manifest`) refuses the
    directory: only the save itself can tell that every rank finished writing.
    """


SHARD_PROBLEM_RULES: dict[str, Rule] = {
    "latest-tag-missing": DeepSpeedLatestTagMissing,
    "rank-file-missing": DeepSpeedRankFileMissing,
    "uncommitted-save": ShardedSaveUncommitted,
    "unfinished-save": ShardedSaveUnfinished,
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


def check_rank_states(ctx: Context, manifest: Manifest, view: CheckpointView) -> Iterator[Finding]:
    """Every rank below the recorded world size is recorded, and held by the checkpoint."""
    ranks = manifest.components.ranks
    if ranks is None:
        return
    recorded = {state.rank for state in ranks.states}
    # Stops at the first few unrecorded ranks: a world size read from a manifest is never counted out.
    unrecorded = list(islice((rank for rank in range(ranks.world_size) if rank not in recorded), _NAMED_RANKS + 1))
    if unrecorded:
        yield ctx.finding(
            RankStateMissing,
            f"the manifest records world size {ranks.world_size} but no state of rank {_ranks(unrecorded)}",
            file=ctx.manifest_path,
            path=("components", "ranks", "states"),
        )
    stored = view.resolve(ranks.at)
    held = len(stored) if isinstance(stored, Sequence) and not isinstance(stored, (str, bytes)) else 0
    if held < ranks.world_size:
        missing = "rank" + (f" {held}" if held + 1 == ranks.world_size else f"s {held} to {ranks.world_size - 1}")
        yield ctx.finding(
            RankStateMissing,
            f"{ranks.at}: the checkpoint holds the state of {held} of the {ranks.world_size} ranks that saved it: {missing} missing",
            file=view.path,
            pointer=ranks.at,
            path=("components", "ranks", "world_size"),
        )
    for index, state in enumerate(ranks.states):
        if state.rank < held:
            yield from _rank_state_present(ctx, view, state, ("components", "ranks", "states", index))
    yield from _copied_generators(ctx, ranks, view)


def _copied_generators(ctx: Context, ranks: RanksRecord, view: CheckpointView) -> Iterator[Finding]:
    """Ranks whose generator holds the same tensor bytes in the file as another rank's (or the very
    same tensor, which torch.save writes once), where the manifest recorded different digests: all
    but one were restored from another rank."""
    prefix = f"{ranks.at}/"
    crcs = {id(view.resolve(pointer)): tensor.crc32c() for pointer, tensor in view.tensors.items() if pointer.startswith(prefix)}
    recorded: dict[tuple[int, str], str | None] = {}
    alike: dict[tuple[str, tuple[tuple[str, str], ...]], list[int]] = {}
    # Each place is walked once, and only inside the ranks' list (nothing else has a rank's
    # tensors): a manifest naming one large subtree for every one of its states stays linear.
    walked: dict[str, tuple[tuple[str, str], ...]] = {}
    for state in ranks.states:
        for generator in state.rng.generators if state.rng is not None else []:
            recorded[(state.rank, generator.name)] = generator.sha256
            if generator.at not in walked:
                leaves = _leaves(view.resolve(generator.at)) if generator.at.startswith(prefix) else iter(())
                walked[generator.at] = tuple(sorted((path, crcs[id(leaf)]) for path, leaf in leaves if id(leaf) in crcs))
            held = walked[generator.at]
            if held:
                alike.setdefault((generator.name, held), []).append(state.rank)
    for (name, _), same in alike.items():
        digests = {recorded[(rank, name)] for rank in same}
        if len(same) > 1 and None not in digests and len(digests) > 1:
            shown = ", ".join(map(str, same[:_NAMED_RANKS])) + (" (and more)" if len(same) > _NAMED_RANKS else "")
            yield ctx.finding(
                RankGeneratorsCopied,
                f"ranks {shown} hold the same {name} generator state, which the manifest recorded as different for each: "
                "all but one were restored from another rank",
                file=view.path,
                pointer=f"{ranks.at}/{same[-1]}/rng/{name}",
                path=("components", "ranks", "states"),
            )


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every value inside `value` that is neither a mapping nor a list, with its path below it."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield from _leaves(child, f"{path}/{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _leaves(child, f"{path}/{index}")
    else:
        yield path, value


def _rank_state_present(ctx: Context, view: CheckpointView, state: RankState, path: tuple[str | int, ...]) -> Iterator[Finding]:
    generators = state.rng.generators if state.rng is not None else []
    locations = [generator.at for generator in generators]
    locations += [state.data_position.at] if state.data_position is not None and state.data_position.at is not None else []
    for at in locations:
        if view.resolve(at) is MISSING:
            yield ctx.finding(
                RankStateMissing,
                f"rank {state.rank}: the manifest records its state at {at}, but the checkpoint has nothing there",
                file=view.path,
                pointer=at,
                path=path,
            )


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:_NAMED_RANKS])) + (" (and more)" if len(ranks) > _NAMED_RANKS else "")
