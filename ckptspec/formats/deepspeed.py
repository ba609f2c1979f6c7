"""DeepSpeed checkpoint directories, read without torch or DeepSpeed.

`engine.save_checkpoint(save_dir, tag)` writes one torch.save file per rank role into
`save_dir/<tag>/` (`mp_rank_XX_model_states.pt`; with ZeRO, `[bf16_]zero_pp_rank_D_mp_rank_XX_optim_states.pt`
per data-parallel rank D, and for ZeRO-3 `zero_pp_rank_D_mp_rank_XX_model_states.pt`), then rank 0
writes the tag into the text file `save_dir/latest`, last. Each file is read with the torch zip reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path

from .._dataclass import dataclass
from .._exceptions import CkptspecError, CorruptCheckpointError, ReaderError
from .._pointer import escape_segment
from ._inspection import Inspection
from ._io import unreadable
from ._names import DEEPSPEED_LATEST as LATEST, DEEPSPEED_STATES_FILE as _STATES_FILE

__all__ = ["DeepSpeedLayout", "DeepSpeedPlaces", "deepspeed_places", "inspect_deepspeed", "locate_deepspeed"]

_RANK_FILES = (
    ("ZeRO optimizer", "data-parallel", re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")),
    ("ZeRO-3 model states", "data-parallel", re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")),
    ("model states", "model-parallel", re.compile(r"^mp_rank_(\d+)_model_states\.pt$")),
)
"""Each kind of rank file DeepSpeed writes, the rank its first number counts, and its name."""
_ZERO_OPTIMIZER_KEYS = ("base_optimizer_state", "optimizer_state_dict")
"""Where a ZeRO file keeps its rank's torch optimizer state: stages 1 and 2, then stage 3."""
_SHOWN_RANKS = 8
"""Missing ranks one finding names; the rest are only counted."""
_LATEST_LIMIT = 4096
"""More than any tag DeepSpeed writes; a larger `latest` is not one."""


@dataclass
class DeepSpeedLayout:
    tag_directory: Path
    latest: Path | None
    """The `latest` file that named this tag, when the checkpoint was located through it."""
    files: list[Path] = field(default_factory=list)
    """The `*_states.pt` files, in name order; empty when the tag directory is missing."""
    problems: list[tuple[str, Path, str]] = field(default_factory=list)
    """`(kind, file, message)`: `latest-tag-missing`, `rank-file-missing`."""

    def check_rank_files(self) -> None:
        """Record the rank files absent from the tag directory, given the world sizes the first model
        states file records (`dp_world_size`, `mp_world_size`) or, without one, the `partition_count`
        of the first ZeRO file, as `zero_to_fp32` reads it. A kind of file is expected when one of its
        kind is present, or when the recorded ZeRO stage calls for it. Missing ranks are named from the
        gaps between the files present, never by counting up to a number read from a file."""
        if self.files and not any(file.name.endswith("_model_states.pt") for file in self.files):
            message = "no *_model_states.pt file: the module weights and the world sizes of the save are missing"
            self.problems.append(("rank-file-missing", self.tag_directory, message))
        facts = _recorded_facts(self.files)
        expected_kinds = {
            "ZeRO optimizer": facts.zero_stage in {1, 2, 3},
            "ZeRO-3 model states": facts.zero_stage == 3,
            "model states": facts.zero_stage in {0, 1, 2},
        }
        for kind, counted, pattern in _RANK_FILES:
            world_size = facts.dp_world_size if counted == "data-parallel" else facts.mp_world_size
            if type(world_size) is not int:
                continue
            present = _present_ranks(self.files, pattern)
            if not present and expected_kinds[kind]:
                present = {"00": []}
            for group, ranks in sorted(present.items()):
                within = sorted({rank for rank in ranks if rank < world_size})
                if len(within) < world_size:
                    self._record_missing(kind, counted, group, within, world_size)

    def _record_missing(self, kind: str, counted: str, group: str, ranks: list[int], world_size: int) -> None:
        after = ranks[-1] + 1 if ranks else 0
        missing = [rank for low, high in zip([-1, *ranks], ranks) for rank in range(low + 1, min(high, low + 1 + _SHOWN_RANKS))]
        missing += range(after, min(world_size, after + _SHOWN_RANKS))
        count = world_size - len(ranks)
        shown = ", ".join(str(rank) for rank in missing[:_SHOWN_RANKS]) + (", ..." if count > _SHOWN_RANKS else "")
        within = f" (model-parallel rank {group})" if counted == "data-parallel" else ""
        message = f"{kind} files of {count} of {world_size} {counted} ranks{within} are missing: ranks {shown}"
        self.problems.append(("rank-file-missing", self.tag_directory, message))


@dataclass(frozen=True)
class _RecordedFacts:
    dp_world_size: object = None
    mp_world_size: object = None
    zero_stage: object = None


def _recorded_facts(files: list[Path]) -> _RecordedFacts:
    """The world sizes and ZeRO stage a save records, from its first readable model states file, else
    the data-parallel size from its first ZeRO file. A file's own damage is reported when it is read."""
    from .torchzip import open_torch_checkpoint

    model_states = next((file for file in files if file.name.endswith("_model_states.pt")), None)
    optim_states = next((file for file in files if file.name.endswith("_optim_states.pt")), None)
    try:
        if model_states is not None:
            with open_torch_checkpoint(model_states) as checkpoint:
                tree = _mapping(checkpoint.tree)
                stage = _mapping(_mapping(tree.get("ds_config")).get("zero_optimization")).get("stage", 0)
                return _RecordedFacts(tree.get("dp_world_size"), tree.get("mp_world_size", 1), stage if type(stage) is int else None)
        if optim_states is not None:
            with open_torch_checkpoint(optim_states) as checkpoint:
                counts = _mapping(_mapping(checkpoint.tree).get("optimizer_state_dict")).get("partition_count")
                counts = counts if isinstance(counts, list) else [counts]
                return _RecordedFacts(max((n for n in counts if type(n) is int), default=None))
    except CkptspecError:
        pass
    return _RecordedFacts()


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _present_ranks(files: list[Path], pattern: re.Pattern[str]) -> dict[str, list[int]]:
    """The ranks of the files matching `pattern`, grouped by their model-parallel rank (the file name's
    last number, as written) for ZeRO files, in one group for model states files."""
    present: dict[str, list[int]] = {}
    for file in files:
        if match := pattern.match(file.name):
            group = match.group(2) if pattern.groups == 2 else "00"
            present.setdefault(group, []).append(int(match.group(1)))
    return present


@dataclass(frozen=True)
class DeepSpeedPlaces:
    """Where a DeepSpeed save keeps each component, as pointers into the tree of its rank files."""

    model: str | None
    optimizers: list[str]
    schedulers: list[str]


def deepspeed_places(tree: Mapping[str, object]) -> DeepSpeedPlaces:
    """The places in `tree` (each rank file's tree under its file stem): the module and scheduler of
    the first model states file; the optimizer in it without ZeRO, else each ZeRO file's optimizer
    over its rank's partition. With ZeRO-3 the module holds empty placeholders; the weights are in
    the ZeRO files' `fp32_flat_groups`."""
    model_files = [stem for stem in sorted(tree) if stem.endswith("_model_states")]
    first = _mapping(tree[model_files[0]]) if model_files else {}
    prefix = "/" + escape_segment(model_files[0]) if model_files else ""
    optimizers = [f"{prefix}/optimizer"] if isinstance(first.get("optimizer"), dict) else []
    for stem in sorted(tree):
        zero = _mapping(_mapping(tree[stem]).get("optimizer_state_dict")) if stem.endswith("_optim_states") else {}
        key = next((key for key in _ZERO_OPTIMIZER_KEYS if isinstance(zero.get(key), dict)), None)
        optimizers += [f"/{escape_segment(stem)}/optimizer_state_dict/{key}"] if key else []
    return DeepSpeedPlaces(
        model=f"{prefix}/module" if isinstance(first.get("module"), dict) else None,
        optimizers=optimizers,
        schedulers=[f"{prefix}/lr_scheduler"] if isinstance(first.get("lr_scheduler"), dict) else [],
    )


def locate_deepspeed(path: Path) -> DeepSpeedLayout:
    """The DeepSpeed save at `path`: a tag directory, or a save directory whose `latest` names one."""
    latest = path / LATEST
    if not latest.is_file():
        return DeepSpeedLayout(path, None, _states_files(path))
    tag = _read_tag(latest)
    tag_directory = path / tag
    if not tag_directory.is_dir():
        layout = DeepSpeedLayout(tag_directory, latest)
        message = f"{LATEST} names tag {tag!r}, but {tag_directory} is not there: the save never finished or was not copied"
        layout.problems.append(("latest-tag-missing", latest, message))
        return layout
    return DeepSpeedLayout(tag_directory, latest, _states_files(tag_directory))


def _read_tag(latest: Path) -> str:
    try:
        with latest.open("rb") as handle:
            data = handle.read(_LATEST_LIMIT + 1)
    except OSError as exc:
        raise unreadable(latest, exc) from None
    tag = data.decode("utf-8", "replace").strip()
    if len(data) > _LATEST_LIMIT or not tag or "/" in tag or "\\" in tag or tag in {".", ".."} or "\n" in tag:
        raise ReaderError(f"{latest}: does not hold a DeepSpeed checkpoint tag (one line naming a directory beside it)")
    return tag


def _states_files(directory: Path) -> list[Path]:
    try:
        return sorted(child for child in directory.iterdir() if _STATES_FILE.match(child.name) and child.is_file())
    except OSError as exc:
        raise unreadable(directory, exc) from None


def inspect_deepspeed(path: Path) -> Inspection:
    """Summarise a DeepSpeed save: every rank file's tensors under `/<file stem>`, each component at
    the first file whose tensors it holds (a model states file keeps `optimizer: None` under ZeRO).
    A missing tag or rank file is a `CorruptCheckpointError` naming it."""
    from .torchzip import inspect_torch_checkpoint

    layout = locate_deepspeed(path)
    parts = [inspect_torch_checkpoint(file) for file in layout.files]
    layout.check_rank_files()
    if layout.problems or not parts:
        messages = [message for _, _, message in layout.problems] or [f"{layout.tag_directory}: no *_states.pt files"]
        raise CorruptCheckpointError(f"{path}: {'; '.join(messages)}")
    prefixes = ["/" + escape_segment(file.stem) for file in layout.files]
    tensors = [replace(tensor, key=prefix + tensor.key) for prefix, part in zip(prefixes, parts) for tensor in part.tensors]
    places = [(prefix, part, name, at) for prefix, part in zip(prefixes, parts) for name, at in part.components.items()]
    holding = [(name, prefix + at) for prefix, part, name, at in places if any(t.component == name for t in part.tensors)]
    components: dict[str, str] = {}
    for name, at in [*holding, *((name, prefix + at) for prefix, _, name, at in places)]:
        components.setdefault(name, at)
    return Inspection(
        path=str(path),
        format="deepspeed",
        files=[summary for part in parts for summary in part.files],
        tensors=tensors,
        globals=[ref for part in parts for ref in part.globals],
        metadata={"tag": layout.tag_directory.name, "rank_files": [file.name for file in layout.files]},
        components=components,
    )
