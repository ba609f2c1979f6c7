"""`inspect`, `validate` and `audit` run without click (`ckptspec.cli._direct`) and must do exactly
what the click commands do: the same parameters, the same bytes out, the same exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ckptspec.cli import cli, main
from ckptspec.cli._direct import BODIES, parsed
from ckptspec.cli._direct_plan import PLAN
from ckptspec.cli._plan_from_click import plan_text


def test_the_plan_is_read_from_the_click_commands() -> None:
    assert Path(sys.modules["ckptspec.cli._direct_plan"].__file__ or "").read_text(encoding="utf-8") == plan_text()


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("direct")
    (root / "a directory").mkdir()
    (root / "key.pem").write_text("not a key")
    return {"DIR": str(root / "a directory"), "FILE": str(root / "key.pem"), "NEW": str(root / "new.json")}


COMMAND_LINES = [
    "inspect x.pt",
    "inspect --tensors x.pt",
    "inspect x.pt --format json --tensors",
    "inspect --format=json x.pt",
    "inspect --format=text --tensors x.pt",
    "inspect DIR",
    "validate x.pt",
    "validate --spec spec.yaml --require-spec --require-signature --replay x.pt",
    "validate x.pt --trusted-key FILE --trusted-key NEW --trusted-certificate FILE",
    "validate --format junit -o NEW x.pt",
    "validate --format sarif --output=NEW x.pt",
    "validate --spec= x.pt",
    "audit DIR",
    "audit DIR x.pt y.pt --jobs 2 --follow-symlinks --lineage",
    "audit -j 2 --format markdown DIR",
    "audit --jobs=3 DIR",
    "audit --jobs 01 DIR",
    "audit s3://bucket/run memory://store/run",
]
"""What `_direct` runs itself: each must reach the command with the parameters click gives it."""

LEFT_TO_CLICK = [
    "inspect",
    "inspect x.pt y.pt",
    "inspect --help",
    "inspect -h x.pt",
    "inspect --format xml x.pt",
    "inspect --format JSON x.pt",
    "inspect --tensors=yes x.pt",
    "inspect --tensor x.pt",
    "inspect --tensors --tensors x.pt",
    "inspect -- x.pt",
    "inspect - ",
    "inspect --format",
    "inspect --format --tensors x.pt",
    "validate x.pt --output DIR",
    "validate x.pt --spec a.yaml --spec b.yaml",
    "validate --trusted-key",
    "validate unknown://place",
    "audit",
    "audit --jobs 0 DIR",
    "audit --jobs -1 DIR",
    "audit --jobs two DIR",
    "audit --jobs ' 2' DIR",
    "audit -j2 DIR",
    "audit --executor local DIR",
    "audit --executor=dask DIR",
    "audit --version DIR",
]
"""What `_direct` leaves to click: help, usage errors, values click refuses or reads by a callback."""


def _tokens(line: str, places: dict[str, str]) -> list[str]:
    import shlex

    return [places.get(token, token) for token in shlex.split(line)]


def _click_params(name: str, tokens: list[str]) -> dict[str, object] | None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    try:
        return command.make_context(name, list(tokens)).params
    except (click.exceptions.Exit, click.ClickException):
        return None


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_direct_reads_a_command_line_as_click_does(line: str, places: dict[str, str]) -> None:
    name, *tokens = _tokens(line, places)
    direct = parsed(PLAN[name], tokens)
    assert direct is not None, "left to click"
    assert direct == _click_params(name, tokens)


@pytest.mark.parametrize("line", LEFT_TO_CLICK)
def test_direct_leaves_the_rest_to_click(line: str, places: dict[str, str]) -> None:
    name, *tokens = _tokens(line, places)
    assert parsed(PLAN[name], tokens) is None


def test_an_output_click_could_not_read_is_left_to_click(monkeypatch: pytest.MonkeyPatch, places: dict[str, str]) -> None:
    """click refuses an existing `--output` it cannot read (root reads every file, so the answer is faked)."""
    tokens = _tokens("x.pt --output FILE", places)
    assert parsed(PLAN["validate"], tokens) is not None
    monkeypatch.setattr(os, "access", lambda *_arguments: False)
    assert parsed(PLAN["validate"], tokens) is None and _click_params("validate", tokens) is None


def test_a_value_click_fails_on_is_left_to_click() -> None:
    """A NUL in `--output`: click's conversion raises, and the command line's handler reports it."""
    tokens = ["x.pt", "--output", "a\x00b"]
    assert parsed(PLAN["validate"], tokens) is None
    with pytest.raises(ValueError, match="null"):
        _click_params("validate", tokens)


# --- whole commands, once through `_direct` and once through click --------------------------------

PROBE = """
import sys
import ckptspec.cli._direct as direct
if sys.argv[1] == "click":
    direct.BODIES.clear()
from ckptspec.cli import main
try:
    main(sys.argv[3:])
finally:
    with open(sys.argv[2], "w") as seen:
        seen.write(str("click" in sys.modules))
"""


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    root = tmp_path_factory.mktemp("direct-run")
    for step in (1, 2):
        torch.save({"state_dict": torch.nn.Linear(3, 2).state_dict(), "global_step": step}, root / f"step-{step}.pt")
    spec = root / "spec.yaml"
    subprocess.run([sys.executable, "-m", "ckptspec", "init", "-o", str(spec)], capture_output=True, check=True)
    subprocess.run([sys.executable, "-m", "ckptspec", "manifest", "--spec", str(spec), str(root / "step-1.pt")], capture_output=True, check=True)
    (root / "empty").mkdir()
    return root


def _outcome(way: str, arguments: list[str], root: Path, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes, bytes | None, bool]:
    seen = root / f"seen-{way}"
    report = root / "report.out"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", PROBE, way, str(seen), *arguments], capture_output=True, cwd=root, env=env)
    written = report.read_bytes() if report.exists() else None
    return done.returncode, done.stdout, done.stderr, written, seen.read_text() == "True"


WHOLE_COMMANDS = [
    ["inspect", "step-1.pt"],
    ["inspect", "--format", "json", "--tensors", "step-2.pt"],
    ["inspect", "missing.pt"],
    ["validate", "step-1.pt"],
    ["validate", "--spec", "spec.yaml", "--format", "json", "step-1.pt"],
    ["validate", "step-2.pt", "--format", "junit", "-o", "report.out"],
    ["validate", "--spec", "spec.yaml", "-o", "spec.yaml", "step-1.pt"],
    ["audit", "--jobs", "2", "."],
    ["audit", "--format", "sarif", "--output", "report.out", "step-1.pt", "step-2.pt"],
    ["audit", "empty"],
]


@pytest.mark.parametrize("arguments", WHOLE_COMMANDS, ids=" ".join)
def test_a_command_run_directly_writes_what_click_writes(arguments: list[str], run_directory: Path) -> None:
    *directly, click_loaded_directly = _outcome("direct", arguments, run_directory)
    *through_click, click_loaded = _outcome("click", arguments, run_directory)
    assert directly == through_click
    assert click_loaded
    usage_error = arguments == ["audit", "empty"]
    assert click_loaded_directly == usage_error  # a usage error is click's to show


def test_an_ascii_terminal_is_left_to_click(run_directory: Path) -> None:
    """click writes UTF-8 to a stream whose encoding is ASCII; the command then goes to click."""
    import shutil

    named = run_directory / "modèle.pt"
    shutil.copy(run_directory / "step-2.pt", named)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    try:
        *directly, click_loaded = _outcome("direct", ["validate", named.name], run_directory, env)
        assert tuple(directly) == _outcome("click", ["validate", named.name], run_directory, env)[:4]
        assert click_loaded and directly[1].startswith("modèle.pt: FAIL".encode())
    finally:
        named.unlink()


def test_an_interrupted_command_ends_as_click_ends_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], run_directory: Path) -> None:
    from ckptspec.cli import _inspecting, inspect

    def interrupted(**_options: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_inspecting, "run_inspect", interrupted)
    monkeypatch.setattr(inspect, "run_inspect", interrupted)
    outcomes = []
    for bodies in (BODIES, {}):
        monkeypatch.setattr("ckptspec.cli._direct.BODIES", bodies)
        with pytest.raises(SystemExit) as ended:
            main(["inspect", str(run_directory / "step-1.pt")])
        outcomes.append((ended.value.code, capsys.readouterr()))
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == 1 and outcomes[0][1].err == "\nAborted!\n"


def test_the_direct_report_is_the_report(run_directory: Path) -> None:
    """Not only the same as click's: the report of the checkpoints, as JSON."""
    code, stdout, _, _, click_loaded = _outcome("direct", ["audit", "--format", "json", "."], run_directory)
    report = json.loads(stdout)
    assert not click_loaded and code == 1
    assert {"step-1.pt", "step-2.pt"} <= {Path(result["checkpoint"]).name for result in report["results"]}
