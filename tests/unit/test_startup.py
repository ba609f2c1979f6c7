"""What the command line loads, and that it collects garbage again once a command is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run_probe(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_collection_resumes_once_the_command_is_loaded() -> None:
    probe = (
        "import gc\n"
        "import ckptspec.cli as cli\n"
        "from ckptspec.cli import _collector\n"
        "stopped = _collector.pause() and not gc.isenabled()\n"
        "cli.cli.get_command(None, 'validate')\n"
        "print(stopped, gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    assert run_probe(probe) == "True True True"


def test_a_collector_stopped_by_the_caller_stays_stopped() -> None:
    probe = (
        "import gc\n"
        "gc.disable()\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        "    cli.main(['rule', 'CKS001'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(gc.isenabled())"
    )
    assert run_probe(probe).splitlines()[-1] == "False"


def test_the_command_runs_with_the_collector_on() -> None:
    probe = (
        "import gc\n"
        "import ckptspec.cli as cli\n"
        "from ckptspec.cli import documents\n"
        "init = next(command for command in documents.COMMANDS if command.name == 'init')\n"
        "seen = []\n"
        "original = init.callback\n"
        "def spy(*args, **kwargs):\n"
        "    seen.append(gc.isenabled())\n"
        "    return original(*args, **kwargs)\n"
        "init.callback = spy\n"
        "try:\n"
        "    cli.main(['init'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(seen)"
    )
    assert run_probe(probe).splitlines()[-1] == "[True]"


def test_help_loads_no_command() -> None:
    probe = (
        "import sys\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(run_probe(probe).splitlines()[-1].split())
    assert not loaded & {"pydantic", "yaml", "crc32c", "ckptspec._documents", "ckptspec._validate", "ckptspec.checks", "ckptspec.formats"}
    from ckptspec.cli import COMMAND_MODULES

    assert not loaded & {f"ckptspec.cli.{module}" for module in COMMAND_MODULES.values()}


@pytest.fixture(scope="module")
def torch_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    path = tmp_path_factory.mktemp("startup") / "model.pt"
    torch.save(torch.nn.Linear(4, 2).state_dict(), path)
    return path


def test_inspecting_a_checkpoint_skips_the_crc32c_package_metadata(torch_file: Path) -> None:
    """The `crc32c` package's `__init__` looks up its own version through importlib.metadata; the
    readers load its compiled function alone."""
    probe = (
        "import sys\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        f"    cli.main(['inspect', '--format', 'json', {str(torch_file)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(run_probe(probe).splitlines()[-1].split())
    assert "crc32c._crc32c" in loaded
    assert not loaded & {"crc32c", "importlib.metadata", "argparse", "pydantic"}


def test_the_compiled_crc32c_is_the_packages() -> None:
    import crc32c as package

    from ckptspec._crc32c import crc32c

    data = bytes(range(256)) * 257
    assert crc32c is package.crc32c and crc32c(data) == package.crc32c(data) == package.crc32c(data[7:], package.crc32c(data[:7]))


@pytest.fixture(scope="module")
def adopted_checkpoint(torch_file: Path) -> Path:
    """`torch_file` with a manifest that embeds the starter spec, as `ckptspec manifest --spec` writes it."""
    spec = torch_file.parent / "spec.yaml"
    for command in (["init", "--force", "-o", str(spec)], ["manifest", "--force", "--spec", str(spec), str(torch_file)]):
        subprocess.run([sys.executable, "-m", "ckptspec", *command], capture_output=True, check=True)
    return torch_file


UNUSED_BY_A_TORCH_FILE = {
    "pydantic",
    "yaml",
    "ckptspec._models",
    "ckptspec._yaml_events",
    "ckptspec.formats._dcp_metadata",
    "ckptspec.formats._hdf5",
    "ckptspec.formats.keras",
    "ckptspec.formats.keras_export",
    "ckptspec.formats.legacy_torch",
    "ckptspec.formats.tf_state",
    "ckptspec.formats.torch_export",
    "ckptspec.formats.torchscript",
    "ckptspec.report.json_",
    "ckptspec.report.junit",
    "ckptspec.report.markdown",
    "ckptspec.report.sarif",
    "difflib",
    "xml.etree.ElementTree",
}
"""Readers of other formats and of the files exported beside a checkpoint, the renderers of other
report formats, and what only a misspelt document key needs."""


def test_validating_a_torch_file_loads_only_what_it_uses(adopted_checkpoint: Path) -> None:
    probe = (
        "import sys\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        f"    cli.main(['validate', {str(adopted_checkpoint)!r}])\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    *report, exit_line, modules = run_probe(probe).splitlines()
    assert exit_line in ("exit 0", "exit 1") and any(str(adopted_checkpoint) in line for line in report)
    loaded = set(modules.split())
    assert {"ckptspec.formats.torchzip", "ckptspec._plain", "ckptspec.report.text"} <= loaded
    assert not loaded & UNUSED_BY_A_TORCH_FILE


@pytest.mark.parametrize("command", [["validate", "--spec", "SPEC", "CHECKPOINT"], ["audit", "--jobs", "2", "--spec", "SPEC", "DIRECTORY"]])
def test_validate_and_audit_read_documents_without_pydantic_or_pyyaml(adopted_checkpoint: Path, command: list[str]) -> None:
    """The manifest and the operator's spec, as ckptspec writes them, become plain records
    (`ckptspec._plain`) read line by line (`ckptspec._yaml_block`)."""
    places = {"SPEC": str(adopted_checkpoint.parent / "spec.yaml"), "CHECKPOINT": str(adopted_checkpoint), "DIRECTORY": str(adopted_checkpoint.parent)}
    arguments = [places.get(argument, argument) for argument in command]
    probe = (
        "import sys\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        f"    cli.main({arguments!r})\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    *report, exit_line, modules = run_probe(probe).splitlines()
    assert exit_line in ("exit 0", "exit 1") and any("spec my-model" in line for line in report), report
    assert not set(modules.split()) & {"pydantic", "yaml", "ckptspec._models", "ckptspec._yaml_events"}


def test_other_report_formats_load_their_renderer(adopted_checkpoint: Path) -> None:
    probe = (
        "import sys\n"
        "import ckptspec.cli as cli\n"
        "try:\n"
        f"    cli.main(['validate', '--format', 'junit', {str(adopted_checkpoint)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    output = run_probe(probe).splitlines()
    assert output[0].startswith("<?xml") and "<testsuites" in "\n".join(output)
    assert {"ckptspec.report.junit", "xml.etree.ElementTree"} <= set(output[-1].split())
