from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ckptspec.cli import COMMAND_MODULES, COMMAND_SUMMARIES, cli


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_init_output_lints_clean(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    result = runner.invoke(cli, ["init", "--name", "tiny", "--framework", "tensorflow", "-o", str(spec)])
    assert result.exit_code == 0, result.output
    text = spec.read_text()
    assert "# " in text and "name: tiny" in text and "generators: [python, numpy]" in text
    result = runner.invoke(cli, ["lint", str(spec)])
    assert (result.exit_code, result.output) == (0, f"{spec}: ok (spec)\n")


def test_init_refuses_to_overwrite(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("mine")
    result = runner.invoke(cli, ["init", "-o", str(spec)])
    assert result.exit_code == 2
    assert "exists; pass --force" in result.output
    assert spec.read_text() == "mine"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("components:\n  optimiser: {}\n", "spec.yaml:5:3: components.optimiser: unknown key; did you mean 'optimizer'?"),
        ("name: again\n", "spec.yaml:4:1: duplicate key 'name'"),
        ("components:\n  fingerprint:\n    atol: lots\n", "spec.yaml:6:11: components.fingerprint.atol: input should be a valid number"),
    ],
)
def test_lint_names_line_and_field(runner: CliRunner, tmp_path: Path, body: str, expected: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text('ckptspec: "1.0"\nkind: spec\nname: x\n' + body)
    result = runner.invoke(cli, ["lint", str(spec)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.output.startswith(f"{tmp_path}/{expected}")


def test_lint_future_version(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text('ckptspec: "3.0"\nkind: spec\nname: x\n')
    result = runner.invoke(cli, ["lint", str(spec)])
    assert result.exit_code == 1
    assert "written for ckptspec schema 3.0, newer than the 1.2 this release reads; upgrade ckptspec" in result.output


def test_lint_many_files_worst_exit_wins(runner: CliRunner, tmp_path: Path, repo: Path) -> None:
    good = repo / "examples" / "spec.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [")
    assert runner.invoke(cli, ["lint", str(good), str(bad)]).exit_code == 1
    assert runner.invoke(cli, ["lint", str(good), str(bad), str(tmp_path / "missing.yaml")]).exit_code == 2
    assert runner.invoke(cli, ["lint", str(tmp_path)]).exit_code == 2


def test_lint_reports_files_it_cannot_read_as_unreadable(runner: CliRunner, tmp_path: Path) -> None:
    fifo, directory, missing = tmp_path / "fifo.yaml", tmp_path / "specs", tmp_path / "missing.yaml"
    os.mkfifo(fifo)
    directory.mkdir()
    result = runner.invoke(cli, ["lint", "--format", "json", str(fifo), str(directory), str(missing)])
    assert result.exit_code == 2
    assert [(each["status"], each["errors"]) for each in json.loads(result.stdout)["files"]] == [
        ("unreadable", [f"{fifo}: not a regular file but a FIFO (named pipe); a document is a YAML file"]),
        ("unreadable", [f"{directory}: is a directory, not a YAML document"]),
        ("unreadable", [f"{missing}: no such file"]),
    ]


def test_every_format_option_is_explained(runner: CliRunner) -> None:
    for name in sorted(COMMAND_MODULES):
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        formats = [param for param in command.params if "--format" in getattr(param, "opts", [])]
        assert all(param.help for param in formats), name


def test_lint_json_output(runner: CliRunner, repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('ckptspec: "1.0"\nkind: manifest\n')
    result = runner.invoke(cli, ["lint", "--format", "json", str(repo / "examples" / "manifest.yaml"), str(bad)])
    report = json.loads(result.output)
    assert [entry["status"] for entry in report["files"]] == ["ok", "invalid"]
    assert any("format: required key is missing" in error for error in report["files"][1]["errors"])


def test_schema_check_and_write(runner: CliRunner, tmp_path: Path, repo: Path) -> None:
    assert runner.invoke(cli, ["schema", "--check", "--dir", str(repo / "schema")]).exit_code == 0
    stale = tmp_path / "schema"
    shutil.copytree(repo / "schema", stale)
    (stale / "spec-v1.json").write_text("{}")
    result = runner.invoke(cli, ["schema", "--check", "--dir", str(stale)])
    assert result.exit_code == 1 and "spec-v1.json: differs from the models" in result.output
    assert runner.invoke(cli, ["schema", "--write", "--dir", str(stale)]).exit_code == 0
    assert runner.invoke(cli, ["schema", "--check", "--dir", str(stale)]).exit_code == 0


def test_schema_prints_each_kind(runner: CliRunner) -> None:
    for kind in ("spec", "manifest"):
        document = json.loads(runner.invoke(cli, ["schema", "--kind", kind]).output)
        assert document["$id"] == f"urn:ckptspec:schema:{kind}:v1"


def test_every_command_has_help_and_lives_where_the_table_says(runner: CliRunner) -> None:
    for name, module in COMMAND_MODULES.items():
        commands = importlib.import_module(f"ckptspec.cli.{module}").COMMANDS
        assert name in {command.name for command in commands}, f"{name} is not in ckptspec.cli.{module}"
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0, name
        assert (cli.get_command(click.Context(cli), name).help or "").strip(), f"{name} has no help text"
    listed = {command.name for module in set(COMMAND_MODULES.values()) for command in importlib.import_module(f"ckptspec.cli.{module}").COMMANDS}
    assert listed == set(COMMAND_MODULES), "a command module defines a command the table does not list"


def test_top_level_help_lists_every_command(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.output.split("Commands:")[1].strip().splitlines()] == sorted(COMMAND_MODULES)


def test_the_help_listing_is_each_commands_own_summary() -> None:
    """`ckptspec --help` lists commands from a table (importing no command module); it must say
    what each command's help says."""
    assert sorted(COMMAND_SUMMARIES) == sorted(COMMAND_MODULES)
    for name, summary in COMMAND_SUMMARIES.items():
        command = cli.get_command(click.Context(cli), name)
        assert command is not None and command.get_short_help_str(limit=len(summary)) == summary, name


def test_help_imports_no_command_module() -> None:
    from ckptspec.cli._direct import BODIES

    modules = {*COMMAND_MODULES.values(), *(module for module, _ in BODIES.values())}
    code = "import sys; from ckptspec.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
        f"print(sorted(m for m in sys.modules if m in {sorted(f'ckptspec.cli.{module}' for module in modules)!r} or m in ('pydantic', 'rich', 'jsonschema')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_errors_reach_stderr_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ckptspec", "inspect", str(tmp_path / "nothing.ckpt")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"error: {tmp_path}/nothing.ckpt: no such file, directory or TensorFlow checkpoint prefix\n"
