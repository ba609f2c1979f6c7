"""A name read from a file reaches a terminal, a log, a review comment and a JUnit parser as text.

Whoever writes a checkpoint chooses its tensors' names and its file name. Shown as they are, an
escape sequence clears the operator's screen or paints a forged verdict, a bidi override shows
another name than the one on disk, a NUL makes a JUnit report no XML parser reads, rich markup in a
name is interpreted (or raises), and a pipe or backtick breaks a Markdown table apart.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HOSTILE_NAMES = {
    "terminal-escape": "w\x1b[2J\x1b[32mok\x1b[0m",
    "bidi-override": "w\u202egnp.exe",
    "nul": "w\x00x",
    "rich-markup": "w[bold red]x[/bold red][/nope]",
    "markdown-breakout": "w|`x`|<img src=x>",
}
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


@pytest.fixture(params=sorted(HOSTILE_NAMES), ids=sorted(HOSTILE_NAMES))
def renamed(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A checkpoint whose manifest records tensor `wx`, while the file now holds the hostile name."""
    torch = pytest.importorskip("torch")
    name = HOSTILE_NAMES[request.param]
    checkpoint = tmp_path / "model.pt"
    torch.save({"state_dict": {"wx": torch.zeros(2)}}, checkpoint)
    assert _ckptspec("manifest", checkpoint).returncode == 0
    torch.save({"state_dict": {name: torch.zeros(2)}}, checkpoint)
    return checkpoint, name


def _ckptspec(*arguments: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "ckptspec", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, timeout=120, encoding="utf-8", errors="surrogateescape")


def _validated(checkpoint: Path, report: str) -> str:
    outcome = _ckptspec("validate", "--format", report, checkpoint)
    assert outcome.returncode == 1, outcome.stderr
    assert "internal error" not in outcome.stderr
    return outcome.stdout


def test_without_escaping_such_names_break_the_xml_and_the_markup_they_are_written_into() -> None:
    rich = pytest.importorskip("rich.console")
    from rich.errors import MarkupError

    element = ET.Element("testsuite", name=HOSTILE_NAMES["terminal-escape"])
    with pytest.raises(ET.ParseError):
        ET.fromstring(ET.tostring(element, encoding="unicode"))
    with pytest.raises(MarkupError):
        rich.Console(file=open("/dev/null", "w")).print(HOSTILE_NAMES["rich-markup"])  # noqa: SIM115


def test_the_text_report_shows_the_name_escaped(renamed: tuple[Path, str]) -> None:
    checkpoint, name = renamed
    text = _validated(checkpoint, "text")

    assert not _UNSHOWABLE.search(text), text
    assert _escaped(name) in text


def test_the_junit_report_parses_and_names_the_tensor(renamed: tuple[Path, str]) -> None:
    checkpoint, name = renamed
    suites = ET.fromstring(_validated(checkpoint, "junit"))

    failures = "\n".join(failure.text or "" for failure in suites.iter("failure"))
    assert _escaped(name) in failures


def test_the_markdown_tables_keep_their_columns(renamed: tuple[Path, str]) -> None:
    checkpoint, name = renamed
    markdown = _validated(checkpoint, "markdown")

    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    header = next(index for index, row in enumerate(rows) if row.startswith("| rule "))
    assert {_cells(row) for row in rows[header:]} == {5}, rows
    assert not _UNSHOWABLE.search(markdown)
    assert not re.search(r"(?<!\\)<", _outside_code_spans(markdown)), markdown


def test_inspect_prints_the_name_as_text(renamed: tuple[Path, str]) -> None:
    checkpoint, name = renamed
    outcome = _ckptspec("inspect", "--tensors", checkpoint)

    assert outcome.returncode == 0, outcome.stderr
    assert not _UNSHOWABLE.search(outcome.stdout)
    assert f"/state_dict/{_escaped(name)}" in outcome.stdout


def test_a_file_name_with_a_line_break_cannot_forge_a_verdict(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    checkpoint = tmp_path / "bad.pt\nmodel.pt: ok"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, checkpoint)

    outcome = _ckptspec("validate", checkpoint)

    assert outcome.returncode == 1, outcome.stderr
    assert not any(line.endswith("model.pt: ok") for line in outcome.stdout.splitlines()), outcome.stdout
    assert "bad.pt\\x0amodel.pt: ok: FAIL" in outcome.stdout


def _escaped(name: str) -> str:
    """The name as a report shows it: a segment of a JSON pointer, unshowable characters escaped."""
    from ckptspec._pointer import escape_segment
    from ckptspec._printable import printable

    return printable(escape_segment(name))


def _outside_code_spans(markdown: str) -> str:
    return re.sub(r"(`+).*?(?<!`)\1(?!`)", "", markdown)


def _cells(row: str) -> int:
    """The cells of a GitHub Markdown table row: pipes not escaped by a backslash separate them."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1
