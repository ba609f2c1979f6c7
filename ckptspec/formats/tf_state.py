"""Read the `checkpoint` state file TensorFlow keeps next to its checkpoints.

The file is a text-format `CheckpointState` proto written by `tf.train.CheckpointManager` and
`tf.compat.v1.train.Saver`:

    model_checkpoint_path: "ckpt-2"
    all_model_checkpoint_paths: "ckpt-1"
    all_model_checkpoint_paths: "ckpt-2"
    all_model_checkpoint_timestamps: 1795969812.1169865

Paths are prefixes, relative to the directory unless absolute.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._dataclass import dataclass
from .._storage import Location, RemotePath, location
from .._exceptions import CorruptCheckpointError, ReaderError
from ._io import read_bytes
from ._names import STATE_FILE_NAME, prefix_file

__all__ = [
    "STATE_FILE_NAME",
    "CheckpointState",
    "latest_checkpoint",
    "list_checkpoints",
    "pointer_dangles",
    "pointer_escape",
    "read_checkpoint_state",
]

_STATE_FILE_LIMIT = 16 << 20
"""TensorFlow writes a few lines per kept checkpoint; a larger `checkpoint` file is not a state file."""

_FIELD = re.compile(
    r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[^\s#]+)\s*(?:#.*)?"""
)
_ESCAPES = {
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "\\": b"\\",
    "'": b"'",
    '"': b'"',
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "v": b"\v",
}
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)")
_PATH_FIELDS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_TIMESTAMP_FIELDS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


@dataclass(frozen=True)
class CheckpointState:
    model_checkpoint_path: Path
    """The latest checkpoint prefix, resolved against the directory."""
    all_model_checkpoint_paths: tuple[Path, ...]
    """Every checkpoint still kept, oldest first, resolved against the directory."""
    all_model_checkpoint_timestamps: tuple[float, ...] = ()
    last_preserved_timestamp: float | None = None


def read_checkpoint_state(directory: str | Path) -> CheckpointState:
    """Parse `directory/checkpoint`; raise `ReaderError` if it is missing or malformed."""
    directory = location(directory)
    state_path = directory / STATE_FILE_NAME
    try:
        text = read_bytes(state_path, _STATE_FILE_LIMIT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReaderError(f"{state_path}: cannot read: {exc}") from None
    fields = _parse_text_proto(text, state_path)
    latest = fields.get("model_checkpoint_path", [])
    if not latest:
        raise CorruptCheckpointError(f"{state_path}: no model_checkpoint_path")
    timestamps = [_as_float(value, state_path) for value in fields.get("all_model_checkpoint_timestamps", [])]
    preserved = fields.get("last_preserved_timestamp", [])
    return CheckpointState(
        model_checkpoint_path=_resolve(directory, _as_text(latest[-1], state_path)),
        all_model_checkpoint_paths=tuple(
            _resolve(directory, _as_text(value, state_path)) for value in fields.get("all_model_checkpoint_paths", [])
        ),
        all_model_checkpoint_timestamps=tuple(timestamps),
        last_preserved_timestamp=_as_float(preserved[-1], state_path) if preserved else None,
    )


def latest_checkpoint(directory: str | Path) -> Path:
    """The prefix of the newest checkpoint the state file names; it must exist (its `.index` file) and
    lie inside `directory`: a state file never leads a reader elsewhere."""
    directory = location(directory)
    prefix = read_checkpoint_state(directory).model_checkpoint_path
    problem = pointer_escape(prefix, [directory]) or pointer_dangles(prefix)
    if problem is not None:
        raise ReaderError(f"{directory / STATE_FILE_NAME}: {problem}")
    return prefix


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Every checkpoint prefix the state file keeps, oldest first, that lies inside `directory` and
    still has its `.index` file."""
    directory = location(directory)
    state = read_checkpoint_state(directory)
    prefixes = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in prefixes:
        prefixes.append(state.model_checkpoint_path)
    return [prefix for prefix in prefixes if pointer_escape(prefix, [directory]) is None and pointer_dangles(prefix) is None]


def pointer_escape(prefix: Path, within: list[Path]) -> str | None:
    """Why a reader must not follow the state file's pointer to `prefix`: it leads outside every one
    of the places `within` (through `..`, an absolute path or a link). None when it stays inside."""
    if isinstance(prefix, RemotePath):
        inside = any(prefix.is_relative_to(place) for place in within if isinstance(place, RemotePath))
    else:
        real = Path(os.path.realpath(prefix))
        inside = any(real.is_relative_to(os.path.realpath(place)) for place in within if isinstance(place, Path))
    if inside:
        return None
    return f"points to checkpoint {prefix}, outside {', '.join(map(str, within))}; it was not followed"


def pointer_dangles(prefix: Path) -> str | None:
    """What is wrong when the checkpoint a state file names does not exist, else None."""
    index = prefix_file(prefix, ".index")
    return None if index.is_file() else f"names checkpoint {prefix}, but {index} does not exist"


def _resolve(directory: Location, value: str) -> Location:
    path = Path(value)
    if path.is_absolute():
        return path
    return directory / value if isinstance(directory, RemotePath) else directory / path


def _parse_text_proto(text: str, state_path: Path) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _FIELD.fullmatch(line)
        if match is None:
            raise CorruptCheckpointError(f"{state_path}:{number}: not a `field: value` line: {line.strip()!r}")
        name, value = match.groups()
        if name not in _PATH_FIELDS + _TIMESTAMP_FIELDS:
            raise CorruptCheckpointError(f"{state_path}:{number}: unknown CheckpointState field {name!r}")
        fields.setdefault(name, []).append(value)
    return fields


def _as_text(value: str, state_path: Path) -> str:
    if len(value) < 2 or value[0] not in "\"'" or value[-1] != value[0]:
        raise CorruptCheckpointError(f"{state_path}: expected a quoted path, got {value}")
    raw = _ESCAPE.sub(lambda match: _unescape(match.group(1).decode("latin-1")), value[1:-1].encode("utf-8"))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{state_path}: path {value} is not UTF-8") from None


def _unescape(sequence: str) -> bytes:
    if sequence[0] == "x" and len(sequence) > 1:
        return bytes([int(sequence[1:], 16)])
    if sequence[0] in "01234567":
        return bytes([int(sequence, 8) & 0xFF])
    return _ESCAPES.get(sequence, sequence.encode("latin-1", "replace"))


def _as_float(value: str, state_path: Path) -> float:
    try:
        return float(value)
    except ValueError:
        raise CorruptCheckpointError(f"{state_path}: expected a number, got {value}") from None
