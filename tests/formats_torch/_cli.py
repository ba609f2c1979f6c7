"""Running the command line in-process, and the weights-only spec the command tests adopt with."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ckptspec.cli import cli

WEIGHTS_SPEC = """\
ckptspec: "1.0"
kind: spec
name: weights
framework: torch
components:
  model: {require: required}
  config: {require: optional}
  optimizer: {require: optional}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
"""


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout + result.stderr
