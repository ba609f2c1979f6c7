"""A Keras model exported beside a TensorFlow checkpoint (`<prefix>.keras`), judged without Keras.

Loading a `.keras` file builds every class its `config.json` names, so it is code unless all of them
are Keras' own and none is a Lambda (which carries Python bytecode). Its weights archive must also be
plain HDF5: the Keras reader refuses external links and data stored in other files.
"""

from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

from .._dataclass import dataclass
from .._storage import STRUCTURE_BLOCK, RemotePath, open_binary
from .._exceptions import CorruptCheckpointError
from ._io import regular_file_size, unreadable
from .._sidecars import KERAS_PROGRAM_SUFFIX, keras_program_path_for
from .keras import CONFIG_MEMBER, METADATA_MEMBER, WEIGHTS_MEMBER, open_keras

__all__ = ["KERAS_PROGRAM_SUFFIX", "ExportedKeras", "keras_program_path_for", "read_keras_program"]

_MAX_BYTES = 1 << 40
_REPLAYED_MEMBERS = frozenset({CONFIG_MEMBER, METADATA_MEMBER, WEIGHTS_MEMBER})
"""Only a sanity cap: the archive is mapped, never read whole."""


@dataclass(frozen=True)
class ExportedKeras:
    path: Path
    weights: Counter[tuple[str, tuple[int, ...]]]
    """How many model weights of each (dtype, shape) the archive holds."""
    refusals: list[str]
    """Why loading the archive would run more than Keras' own layers; empty when it would not."""


def read_keras_program(path: Path) -> ExportedKeras:
    """Read the archive's config and weight inventory; `ReaderError` for one that cannot be read, or
    that is not a regular file (a FIFO would block the reader)."""
    regular_file_size(path, _MAX_BYTES)
    with open_keras(path) as archive:
        if archive.container != "keras":
            refusals = ["a bare HDF5 weights file, not a .keras archive: it holds no architecture to replay"]
        else:
            refusals = [
                f"config.json makes Keras build {ref.module}.{ref.name}, which is not one of Keras' own classes"
                if ref.name not in ("Lambda", "__lambda__")
                else f"config.json holds a {ref.name} ({ref.module}), whose Python bytecode loading would run"
                for ref in archive.code
                if ref.safety != "allowed"
            ]
            refusals += _other_members(path)
        weights = Counter(
            (tensor.dataset.dtype, tuple(tensor.dataset.shape))
            for tensor in archive.tensors.values()
            if tensor.component == "model"
        )
    return ExportedKeras(path, weights, refusals)


def _other_members(path: Path) -> list[str]:
    """Members besides config, metadata and weights (assets, say): Keras would load them too, unjudged."""
    try:
        with zipfile.ZipFile(open_binary(path, block=STRUCTURE_BLOCK) if isinstance(path, RemotePath) else path) as archive:
            others = sorted(set(archive.namelist()) - _REPLAYED_MEMBERS)
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpointError(f"{path}: not a readable zip archive ({exc})") from None
    except OSError as exc:
        raise unreadable(path, exc) from None
    if not others:
        return []
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return [f"the archive also holds {shown}, which Keras would load but ckptspec does not judge"]
