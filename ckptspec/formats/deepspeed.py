"""DeepSpeed checkpoint directories, read without torch or DeepSpeed.

`engine.save_checkpoint(save_dir, tag)` writes one torch.save file per rank role into
`save_dir/<tag>/` (`mp_rank_XX_model_states.pt`; with ZeRO, `[bf16_]zero_pp_rank_D_mp_rank_XX_optim_states.pt`
per data-parallel rank D, and for ZeRO-3 `zero_pp_rank_D_mp_rank_XX_model_states.pt`), then rank 0
writes the tag into the text file `save_dir/latest`, last. Each file is read with the torch zip reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .._exceptions import CkptspecError, CorruptCheckpointError, ReaderError
from .._pointer import escape_segment
from ._inspection import Inspection
from ._io import unreadable
from .detect import DEEPSPEED_LATEST as LATEST
from .detect import DEEPSPEED_STATES_FILE as _STATES_FILE

__all__ = ["DeepSpeedLayout", "inspect_deepspeed", "locate_deepspeed"]

_ZERO_OPTIM_FILE = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
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

    def check_zero_ranks(self) -> None:
        """Record the data-parallel ranks whose ZeRO optimizer file is absent, given the world size the
        model states record. Missing ranks are named from the gaps between the files present, never by
        counting up to a number read from a file."""
        dp_world_size = self._recorded_dp_world_size()
        present: dict[str, list[int]] = {}
        for file in self.files:
            if match := _ZERO_OPTIM_FILE.match(file.name):
                present.setdefault(match.group(2), []).append(int(match.group(1)))
        for mp_rank, ranks in sorted(present.items()):
            if type(dp_world_size) is not int or dp_world_size <= len(ranks):
                continue
            ranks.sort()
            gaps = [str(rank) for low, high in zip([-1, *ranks], ranks) for rank in range(low + 1, min(high, low + 9))]
            shown = ", ".join(gaps[:8]) if gaps else f"above {ranks[-1]}"
            message = (
                f"ZeRO optimizer files of {dp_world_size - len(ranks)} of {dp_world_size} data-parallel ranks "
                f"(model-parallel rank {mp_rank}) are missing: ranks {shown}"
            )
            self.problems.append(("rank-file-missing", self.tag_directory, message))


    def _recorded_dp_world_size(self) -> object:
        from .torchzip import open_torch_checkpoint

        model_states = next((file for file in self.files if file.name.endswith("_model_states.pt")), None)
        if model_states is None:
            return None
        try:
            with open_torch_checkpoint(model_states) as checkpoint:
                tree = checkpoint.tree
                return tree.get("dp_world_size") if isinstance(tree, dict) else None
        except CkptspecError:
            return None  # the file's own damage is reported when it is read


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
    """Summarise a DeepSpeed save: every rank file's tensors under `/<file stem>`. A missing tag or
    rank file is a `CorruptCheckpointError` naming it."""
    from .torchzip import inspect_torch_checkpoint

    layout = locate_deepspeed(path)
    parts = [inspect_torch_checkpoint(file) for file in layout.files]
    layout.check_zero_ranks()
    if layout.problems or not parts:
        messages = [message for _, _, message in layout.problems] or [f"{layout.tag_directory}: no *_states.pt files"]
        raise CorruptCheckpointError(f"{path}: {'; '.join(messages)}")
    tensors = [
        replace(tensor, key=f"/{escape_segment(file.stem)}{tensor.key}")
        for file, part in zip(layout.files, parts)
        for tensor in part.tensors
    ]
    return Inspection(
        path=str(path),
        format="deepspeed",
        files=[summary for part in parts for summary in part.files],
        tensors=tensors,
        globals=[ref for part in parts for ref in part.globals],
        metadata={"tag": layout.tag_directory.name, "rank_files": [file.name for file in layout.files]},
    )
