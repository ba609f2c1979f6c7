"""Fenced code blocks of the project's Markdown, found by the section they are in, and a runner
that executes them the way a reader following the page would."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from ckptspec.cli import cli

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """1-based line of the block's first code line."""
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: str, section: str, *languages: str) -> list[Block]:
    """The code blocks under the heading `section` of `page` (relative to the repository root), in order;
    only those in `languages` when given."""
    path = ROOT / page
    found: list[Block] = []
    current: str | None = None
    fence: tuple[int, str, list[str]] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if fence is not None:
            if line.startswith("```"):
                if current == section and (not languages or fence[1] in languages):
                    found.append(Block(path, fence[0], fence[1], "\n".join(fence[2]) + "\n"))
                fence = None
            else:
                fence[2].append(line)
        elif match := _FENCE.match(line):
            fence = (number + 1, match.group(1), [])
        elif line.startswith("#"):
            current = line.lstrip("#").strip()
    assert found, f"{page}: no code blocks under {section!r}"
    return found


def run_commands(block: Block) -> list[tuple[str, int, str]]:
    """Runs each `ckptspec ...` line of a shell block in the current directory; (line, exit code, output)."""
    results = []
    for line in block.text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "ckptspec", f"{block.where}: only ckptspec commands run here, not {line!r}"
        result = CliRunner().invoke(cli, words[1:])
        results.append((line, result.exit_code, result.output))
    return results


def run_python(block: Block, namespace: dict[str, Any]) -> dict[str, Any]:
    """Executes a Python block in `namespace` (the names the page assumes the reader has) and returns it."""
    exec(compile(block.text, block.where, "exec"), namespace)  # noqa: S102 - the project's own documentation
    return namespace
