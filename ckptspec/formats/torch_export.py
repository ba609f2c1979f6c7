"""Programs written by `torch.export.save` (`.pt2`), read without torch: their weights, the operators
their graph calls, and everything that loading one with `torch.export.load` would run beyond that.

A `.pt2` is a zip whose `models/<name>.json` holds an aten-level graph (constants such as a
BatchNorm's eps are arguments of its nodes), `data/weights/` the raw weight bytes with a JSON config,
and `data/sample_inputs/<name>.pt` a torch.save pickle. `torch.export.load` is not a safe loader: it
unpickles weights and constants marked `use_pickle` with `weights_only=False`, falls back to
`weights_only=False` for sample inputs that fail the safe loader, and parses symbolic shapes with
sympy (which evaluates strings). `ExportedProgramFile.refusals` names each such path in one file;
`replay_records` gives the bytes of an archive that holds only what was checked (no sample inputs),
which is all that replay ever hands to torch.
"""

from __future__ import annotations

import json
import stat
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from .._dataclass import dataclass
from .._storage import STRUCTURE_BLOCK, RemotePath, location, open_binary
from .._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ._io import unreadable
from .._sidecars import PROGRAM_SUFFIX, program_path_for

__all__ = ["PROGRAM_SUFFIX", "ExportedProgramFile", "ProgramWeight", "program_path_for", "read_program"]

_MAX_JSON_BYTES = 256 * 1024 * 1024
_MAX_RECORDS = 1_000_000
_MAX_NODES = 10_000_000
_SAFE_TARGET_PREFIXES = ("torch.ops.aten.", "torch.ops.prims.")
_SAFE_TARGETS = frozenset({"_operator.getitem"})
_DTYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
    9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16", 28: "uint16",
    29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz", 33: "float8_e8m0fnu",
    34: "uint32", 35: "uint64",
}  # fmt: skip
"""torch/_export/serde/schema.py ScalarType → ckptspec's dtype names."""


@dataclass(frozen=True)
class ProgramWeight:
    name: str
    """Fully qualified name in the exported module, as in its state dict."""
    dtype: str
    shape: tuple[int, ...]
    record: str
    """The archive record holding its bytes."""


@dataclass
class ExportedProgramFile:
    path: Path
    root: str
    model: str
    weights: dict[str, ProgramWeight] = field(default_factory=dict)
    targets: Counter[str] = field(default_factory=Counter)
    """How many graph nodes call each operator."""
    refusals: list[str] = field(default_factory=list)
    """Why loading this program with torch could run code beyond its aten graph; empty when it cannot."""

    def replay_records(self) -> Iterator[tuple[str, bytes]]:
        """The records of the archive replay hands to torch: the checked ones, with empty sample inputs."""
        if self.refusals:
            raise ReaderError(f"{self.path}: not replayable: {'; '.join(self.refusals)}")
        with _open_zip(self.path) as archive:
            for info in archive.infolist():
                name = info.filename
                if name.startswith(f"{self.root}/data/sample_inputs/"):
                    yield name, b""
                elif not name.startswith(f"{self.root}/extra/"):
                    yield name, archive.read(info)


def read_program(path: str | Path) -> ExportedProgramFile:
    """Read a `.pt2`'s structure; raises `ReaderError` for a file that is not one, or is damaged."""
    path = location(path)
    with _open_zip(path) as archive:
        infos = archive.infolist()
        if len(infos) > _MAX_RECORDS:
            raise CorruptCheckpointError(f"{path}: {len(infos)} zip records; not a torch.export program")
        compressed = [info.filename for info in infos if info.compress_type != zipfile.ZIP_STORED]
        if compressed:
            raise CorruptCheckpointError(f"{path}: record {compressed[0]} is compressed; torch.export.save stores every record")
        root, model = _root_and_model(path, infos)
        program = ExportedProgramFile(path, root, model)
        names = {info.filename: info for info in infos}
        _read_weights(program, names, _json(path, archive, names, f"{root}/data/weights/{model}_weights_config.json"))
        constants = _json(path, archive, names, f"{root}/data/constants/{model}_constants_config.json", required=False)
        _judge_constants(program, constants)
        _judge_graph(program, _json(path, archive, names, f"{root}/models/{model}.json"))
    return program


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        status = path.stat()
    except OSError as exc:
        raise unreadable(path, exc) from None
    if not stat.S_ISREG(status.st_mode):
        raise ReaderError(f"{path}: not a regular file")
    try:
        return zipfile.ZipFile(open_binary(path, block=STRUCTURE_BLOCK) if isinstance(path, RemotePath) else path)
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpointError(f"{path}: not a readable zip archive ({exc})") from None
    except OSError as exc:
        raise unreadable(path, exc) from None


def _root_and_model(path: Path, infos: list[zipfile.ZipInfo]) -> tuple[str, str]:
    models = [info.filename for info in infos if info.filename.count("/") == 2 and "/models/" in info.filename]
    models = [name for name in models if name.endswith(".json")]
    if not models:
        raise UnsupportedFormatError(f"{path}: a zip archive, but not a torch.export program (no ROOT/models/NAME.json)")
    if len(models) > 1:
        raise UnsupportedFormatError(f"{path}: {len(models)} exported programs in one archive; replay reads archives with one")
    root, _, rest = models[0].partition("/")
    return root, rest[len("models/") : -len(".json")]


def _json(path: Path, archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], name: str, *, required: bool = True) -> Any:
    info = names.get(name)
    if info is None:
        if required:
            raise CorruptCheckpointError(f"{path}: record {name} is missing")
        return None
    if info.file_size > _MAX_JSON_BYTES:
        raise CorruptCheckpointError(f"{path}: record {name} claims {info.file_size} bytes; refusing to read it")
    try:
        return json.loads(archive.read(info))
    except (zipfile.BadZipFile, ValueError, OSError, RecursionError) as exc:
        raise CorruptCheckpointError(f"{path}: record {name} is not readable JSON ({type(exc).__name__})") from None


def _read_weights(program: ExportedProgramFile, names: dict[str, zipfile.ZipInfo], config: Any) -> None:
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise CorruptCheckpointError(f"{program.path}: the weights config has no 'config' mapping")
    for name, entry in entries.items():
        record = f"{program.root}/data/weights/{entry.get('path_name', '')}" if isinstance(entry, dict) else ""
        if not isinstance(entry, dict) or record not in names:
            raise CorruptCheckpointError(f"{program.path}: weight {name!r} names no record of the archive")
        if entry.get("use_pickle"):
            program.refusals.append(f"weight {name!r} is stored as a pickle, which torch.export.load unpickles with weights_only=False")
            continue
        program.weights[name] = _weight(program.path, name, record, entry.get("tensor_meta"))


def _weight(path: Path, name: str, record: str, meta: Any) -> ProgramWeight:
    try:
        dtype = _DTYPES[meta["dtype"]]
        shape = tuple(int(size["as_int"]) for size in meta["sizes"])
    except (KeyError, TypeError, ValueError):
        raise CorruptCheckpointError(f"{path}: weight {name!r} has no static dtype and shape in the weights config") from None
    return ProgramWeight(name, dtype, shape, record)


def _judge_constants(program: ExportedProgramFile, constants: Any) -> None:
    entries = constants.get("config") if isinstance(constants, dict) else None
    for name, entry in (entries or {}).items():
        if isinstance(entry, dict) and entry.get("use_pickle"):
            program.refusals.append(f"constant {name!r} is stored as a pickle, which torch.export.load unpickles with weights_only=False")


def _judge_graph(program: ExportedProgramFile, document: Any) -> None:
    try:
        graph_module = document["graph_module"]
        nodes = graph_module["graph"]["nodes"]
    except (KeyError, TypeError):
        raise CorruptCheckpointError(f"{program.path}: models/{program.model}.json has no graph_module.graph.nodes") from None
    if not isinstance(nodes, list) or len(nodes) > _MAX_NODES:
        raise CorruptCheckpointError(f"{program.path}: the graph's nodes are not a list of at most {_MAX_NODES}")
    for node in nodes:
        target = node.get("target") if isinstance(node, dict) else None
        program.targets[str(target)] += 1
    foreign = sorted(target for target in program.targets if not _safe_target(target))
    if foreign:
        program.refusals.append(f"the graph calls operators outside aten and prims: {', '.join(foreign[:5])}")
    if document.get("range_constraints") or _mentions(graph_module, "as_expr"):
        program.refusals.append("the program has symbolic shapes, which torch.export.load parses with sympy (it evaluates strings)")
    if document.get("guards_code"):
        program.refusals.append("the program carries guard code")
    if graph_module["graph"].get("custom_obj_values"):
        program.refusals.append("the program holds custom (script) objects")


def _safe_target(target: str) -> bool:
    return target in _SAFE_TARGETS or target.startswith(_SAFE_TARGET_PREFIXES)


def _mentions(document: Any, key: str) -> bool:
    """Whether `key` appears as a key anywhere in a JSON document, walked without recursion."""
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if key in value:
                return True
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False
