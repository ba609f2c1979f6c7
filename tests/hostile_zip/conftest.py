"""Session-wide: two real torch.save archives (benign and malicious) and every ambiguous layout of them,
with what `torch.load(weights_only=False)` does to each, observed once in a child process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .._payloads import SystemCall
from ._layouts import LAYOUTS, READ_AS_TORCH_READS, Member, Sources, read_members

_LOAD_EACH = textwrap.dedent(
    """
    import json, sys, warnings
    from pathlib import Path
    import torch

    warnings.simplefilter("ignore")
    marker, verdicts = Path(sys.argv[1]), {}
    for path in sys.argv[2:]:
        try:
            torch.load(path, weights_only=False)
            verdicts[path] = "ran" if marker.exists() else "loaded"
        except Exception as exc:
            verdicts[path] = f"refused: {type(exc).__name__}"
        marker.unlink(missing_ok=True)
    print(json.dumps(verdicts))
    """
)


def _saved(value: object) -> list[Member]:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)  # a buffer gives the root `archive/` whatever the file is later called
    buffer.seek(0)
    return read_members(buffer)


@pytest.fixture(scope="session")
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marker") / "payload-ran"


@pytest.fixture(scope="session")
def sources(marker: Path) -> Sources:
    torch = pytest.importorskip("torch")
    weights = torch.arange(8, dtype=torch.float32)
    benign = _saved({"w": weights, "note": "benign"})
    malicious = _saved({"w": weights, "note": SystemCall(f"touch {marker}")})
    return Sources(benign, malicious)


@pytest.fixture(scope="session")
def layouts(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("layouts")
    written = {}
    for name, build in {**LAYOUTS, **READ_AS_TORCH_READS}.items():
        written[name] = directory / f"{name}.ckpt"
        written[name].write_bytes(build(sources))
    return written


@pytest.fixture(scope="session")
def torch_verdicts(layouts: dict[str, Path], marker: Path) -> dict[str, str]:
    """Layout → `ran` (torch.load ran the payload), `loaded` (it loaded without running it) or `refused: Error`."""
    paths = [str(path) for path in layouts.values()]
    done = subprocess.run([sys.executable, "-c", _LOAD_EACH, str(marker), *paths], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    by_path = json.loads(done.stdout.splitlines()[-1])
    return {name: by_path[str(path)] for name, path in layouts.items()}
