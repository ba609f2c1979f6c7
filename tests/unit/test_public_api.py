from __future__ import annotations

import subprocess
import sys

import ckptspec


def test_all_is_sorted_and_complete() -> None:
    assert ckptspec.__all__ == sorted(ckptspec.__all__)
    public = {name for name in vars(ckptspec) if not name.startswith("_")} - {"formats", "cli"}
    public -= {name for name, value in vars(ckptspec).items() if type(value).__name__ == "module"}
    assert public | {"__version__"} == set(ckptspec.__all__)


def test_core_imports_without_frameworks() -> None:
    code = "import sys, ckptspec, ckptspec.cli; print(sorted(m for m in ('torch', 'tensorflow', 'numpy', 'keras') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
