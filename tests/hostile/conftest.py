"""Hostile files written once per session, judged by ckptspec first, then proven to run under the real loaders.

The order is the point: ckptspec validates and tries to adopt every file, the markers are checked
absent, and only then does a child process load each file with `pickle.load` or
`torch.load(weights_only=False)`, which must create every marker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec.adopt import AdoptionRefused, adopt
from ckptspec.cli import cli

from ._gadgets import GADGETS, reducing

torch = pytest.importorskip("torch")

IN_TORCH_FILES = {
    "os-system": ("os", "system"),
    "pydoc-pipepager": ("pydoc", "pipepager"),
    "logging-config-factory": ("logging.config", "dictConfig"),
    "torch-fx-exec": ("torch.fx.graph_module", "_exec_with_source"),
    "numpy-testing-exec": ("numpy.testing._private.utils", "runstring"),
    "idlelib-eval": ("idlelib.calltip", "get_entity"),
    "uuid-command": ("uuid", "_get_command_stdout"),
}
"""Gadgets also shipped inside a real `torch.save` checkpoint, as a hyper-parameter beside real weights."""

_LOAD_ALL = """\
import pickle, sys
loader = sys.argv[1]
if loader == "torch":
    import torch
for path in sys.argv[2:]:
    try:
        with open(path, "rb") as handle:
            pickle.load(handle) if loader == "pickle" else torch.load(handle, weights_only=False)
    except BaseException:
        pass
"""


@dataclass
class Hostile:
    path: Path
    marker: Path
    exit_code: int = -1
    codes: list[str] = field(default_factory=list)
    dangerous: set[str] = field(default_factory=set)
    adoption_refused: bool = False
    marker_after_ckptspec: bool = True
    proven: bool = False


def judge(path: Path, *options: str) -> tuple[int, dict]:
    """`ckptspec validate --format json` on `path`: exit code and the result."""
    invoked = CliRunner().invoke(cli, ["validate", str(path), "--format", "json", *options])
    return invoked.exit_code, json.loads(invoked.stdout)["results"][0]


def dangerous_named(result: dict) -> set[str]:
    return {f["message"].split()[2] for f in result["findings"] if f["code"] == "CKS401"}


def prove(loader: str, paths: list[Path]) -> None:
    subprocess.run([sys.executable, "-c", _LOAD_ALL, loader, *map(str, paths)], stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=300, check=False)  # fmt: skip


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Hostile]:
    directory = tmp_path_factory.mktemp("hostile")
    files: dict[str, Hostile] = {}
    for gadget in GADGETS:
        entry = Hostile(directory / f"{gadget.name}.pkl", directory / f"{gadget.name}.ran")
        entry.path.write_bytes(gadget.build(entry.marker))
        files[gadget.name] = entry
    for gadget_name, target in IN_TORCH_FILES.items():
        entry = Hostile(directory / f"{gadget_name}.pt", directory / f"{gadget_name}.pt.ran")
        arguments = _arguments_of(gadget_name, entry.marker)
        torch.save({"state_dict": {"w": torch.ones(3)}, "hyper_parameters": reducing(*target, *arguments)}, entry.path)
        files[f"{gadget_name}.pt"] = entry
    for entry in files.values():
        entry.exit_code, result = judge(entry.path)
        entry.codes = [f["code"] for f in result["findings"]]
        entry.dangerous = dangerous_named(result)
        try:
            adopt(entry.path)
        except AdoptionRefused:
            entry.adoption_refused = True
        entry.marker_after_ckptspec = entry.marker.exists()
    prove("pickle", [e.path for e in files.values() if e.path.suffix == ".pkl"])
    prove("torch", [e.path for e in files.values() if e.path.suffix == ".pt"])
    for entry in files.values():
        entry.proven = entry.marker.exists()
    return files


def _arguments_of(gadget_name: str, marker: Path) -> tuple[object, ...]:
    code = f"open({str(marker)!r}, 'w').close()"
    return {
        "os-system": (f"touch {marker}",),
        "pydoc-pipepager": ("", f"touch {marker}"),
        "logging-config-factory": ({"version": 1, "handlers": {"h": {"()": "subprocess.getoutput", "cmd": f"touch {marker}"}}},),
        "torch-fx-exec": (code, {}),
        "numpy-testing-exec": (code, {}),
        "idlelib-eval": (code,),
        "uuid-command": ("touch", str(marker)),
    }[gadget_name]
