"""TensorFlow is optional: the core never imports it, and the adapter says how to install it."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_core_does_not_import_tensorflow() -> None:
    result = _run("import sys, ckptspec; print('tensorflow' in sys.modules, 'keras' in sys.modules)")

    assert result.stdout.split() == ["False", "False"], result.stderr


def test_missing_tensorflow_gives_the_install_hint() -> None:
    result = _run(
        "import sys; sys.modules['tensorflow'] = None\n"
        "try:\n    import ckptspec.tensorflow\nexcept ImportError as exc:\n    print(exc)"
    )

    assert result.stdout.strip() == "ckptspec.tensorflow needs TensorFlow and Keras: pip install 'ckptspec[tensorflow]'"
