"""What the Lightning callback reads from a Trainer's live state: each rank's generators and data
position, the hyper-parameters as recorded, the live model as a sharded save laid it out, and what a
resume learnt."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from .._models import Manifest, RankState, RanksRecord, RngRecord, Spec
from ..formats.dcp import open_dcp_directory
from ._lightning_saves import NAMESPACES
from ._report import FingerprintReplay
from ._torch_enforce import ModelCheck
from ._torch_records import data_position_record
from ._torch_replay import rng_record
from ._torch_tensors import hyperparameters_form, omegaconf_content

__all__ = [
    "AsSaved",
    "Resume",
    "data_position",
    "foreign_generators",
    "gathered",
    "hyperparameters",
    "lightning_version",
    "model_chunks",
    "ranks_record",
    "samples",
]


class Resume:
    """What on_load_checkpoint learnt, kept for the checks that need the optimizers."""

    def __init__(
        self,
        path: Path,
        manifest: Manifest,
        spec: Spec,
        saved_groups: list[list[dict[str, Any]]],
        model_check: ModelCheck,
        fingerprint: FingerprintReplay | None,
        own: dict[str, Any],
        notes: list[str],
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.spec = spec
        self.saved_groups = saved_groups
        self.model_check = model_check
        self.fingerprint = fingerprint
        self.own = own
        """What this rank saved: its generators (`rng`) and data position."""
        self.overrides: dict[str, Any] = {}
        self.given: dict[str, bool] = {}
        self.restored_rng: list[str] = []
        self.notes = notes


class AsSaved(Mapping[str, torch.Tensor]):
    """The live model state of a sharded resume as the save laid it out, looked up one tensor at a
    time: a sharded tensor (DTensor) is gathered whole, and its elements put in the order of the
    save's chunks, which is how the manifest's CRC32C counts them. Gathering is collective: every
    rank looks the tensors up in the same order, the manifest's."""

    def __init__(self, live: Mapping[str, torch.Tensor], chunks: Mapping[str, list[tuple[tuple[int, ...], tuple[int, ...]]]]) -> None:
        self.live = live
        self.chunks = chunks

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self.live[name]
        whole = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        boxes = sorted(self.chunks.get(name, []))
        if len(boxes) <= 1:
            return whole
        pieces = [whole[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))].reshape(-1) for offsets, sizes in boxes]
        return torch.cat(pieces).reshape(whole.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.live)

    def __len__(self) -> int:
        return len(self.live)


def model_chunks(directory: Path) -> dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Model tensor name → its chunks' (offsets, sizes) in a Lightning sharded directory (saved
    under `model` by FSDPStrategy, `state_dict` by ModelParallelStrategy)."""
    return {
        str(tensor.path[1]): [(chunk.offsets, chunk.sizes) for chunk in tensor.chunks]
        for tensor in open_dcp_directory(directory).tensors
        if len(tensor.path) == 2 and tensor.path[0] in ("model", "state_dict")
    }


def samples(trainer: Any) -> int | None:
    """The length of the dataset the fit trains on; None where it has none (an iterable dataset, several loaders)."""
    loader = trainer.train_dataloader
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):
        return None


def gathered(state: Any, world_size: int) -> list[Any]:
    """`state` of every rank, in rank order."""
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, state)
    return gathered


def foreign_generators(recorded: RanksRecord, ranks: list[dict[str, Any]]) -> list[str]:
    """How the per-rank state in the file differs from what the manifest recorded of each rank: a
    rank missing, or generators that are not the ones that rank saved (restoring them would give it
    another rank's draws, or nobody's)."""
    if recorded.world_size != len(ranks):
        return [f"ranks: the manifest records world size {recorded.world_size}, the checkpoint holds {len(ranks)} ranks' state"]
    digests = {state.rank: _digests(state.rng) for state in recorded.states if state.rng is not None}
    problems = []
    for rank, state in enumerate(ranks):
        if "rng" not in state or rank not in digests:
            continue
        found = _digests(rng_record(f"{recorded.at}/{rank}/rng", state["rng"]))
        if found != digests[rank]:
            source = next((f"rank {other}'s" for other, saved in digests.items() if saved == found), "not any saved rank's")
            problems.append(f"rank {rank}: the random generator states the checkpoint holds for it are {source}, "
                            "not the ones it saved")  # fmt: skip
    return problems


def _digests(record: RngRecord) -> dict[str, str | None]:
    return {generator.name: generator.sha256 for generator in record.generators}


def ranks_record(at: str, states: list[dict[str, Any]]) -> RanksRecord:
    """Every rank's generators and data position, as `state_dict` gathered them."""
    return RanksRecord(
        at=at,
        world_size=len(states),
        states=[
            RankState(
                rank=rank,
                rng=rng_record(f"{at}/{rank}/rng", state["rng"]) if "rng" in state else None,
                data_position=data_position_record(f"{at}/{rank}/data_position", state["data_position"]),
            )
            for rank, state in enumerate(states)
        ],
    )


def data_position(trainer: Any) -> dict[str, Any]:
    return {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "batch_in_epoch": trainer.fit_loop.epoch_loop.batch_progress.current.completed,
    }


def lightning_version(trainer: Any) -> dict[str, str]:
    """The distribution and version of the namespace whose Trainer `trainer` is: `lightning` or `pytorch-lightning`."""
    namespace = next(namespace for namespace in NAMESPACES if isinstance(trainer, namespace.Trainer))
    distribution = namespace.__name__.partition(".")[0].replace("_", "-")
    return {distribution: namespace.__version__}


def hyperparameters(saved: Any) -> dict[str, Any]:
    """Lightning's hyper-parameters (a dict, `AttributeDict` or OmegaConf container) as JSON data."""
    saved = omegaconf_content(saved)
    return hyperparameters_form().hyperparameters(saved, "config.hyperparameters") if isinstance(saved, Mapping) else {}
