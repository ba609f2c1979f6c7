"""What the command line loads, and that it collects garbage again once a command is loaded."""

from __future__ import annotations

import subprocess
import sys


def run_probe(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_collection_resumes_once_the_command_is_loaded() -> None:
    probe = (
        "import gc\n"
        "import ckptspec.cli as cli\n"
        "stopped = cli._pause_collection() and not gc.isenabled()\n"
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
    assert not {name for name in loaded if name.startswith("ckptspec.cli.")}
