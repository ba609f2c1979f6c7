"""`audit DIR` stays in DIR: a symbolic link (to a directory or a file, relative or absolute, a chain,
a loop) that leads out of it is a finding naming the link and its target, and nothing behind it is
read; a link that stays inside is judged once; a link swapped in while the audit runs is an error."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec._validate import _judged_inside, audit
from ckptspec._discover import discover
from ckptspec._result import Result
from ckptspec.cli import cli

from ._limited import assert_judged, run_limited

torch = pytest.importorskip("torch")


class _Marker:
    """Pickles as a call to `os.system`: only a loader that runs the file would call it."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("true",)


def _hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    """An audited root holding one clean checkpoint, and a tree outside it holding a hostile one."""
    root, outside = tmp_path / "upload", tmp_path / "elsewhere"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    torch.save({"w": torch.ones(2)}, root / "own.pt")
    _adopt(root / "own.pt")
    torch.save({"w": torch.ones(2), "hook": _Marker()}, outside / "evil.pt")  # torch.save runs nothing
    return root, outside


def _adopt(checkpoint: Path) -> None:
    adopted = CliRunner().invoke(cli, ["manifest", str(checkpoint)])
    assert adopted.exit_code == 0, adopted.output


_LINKS: dict[str, Callable[[Path, Path], list[Path]]] = {}


def _layout(function: Callable[[Path, Path], list[Path]]) -> Callable[[Path, Path], list[Path]]:
    _LINKS[function.__name__] = function
    return function


def _link(link: Path, target: str | Path) -> Path:
    link.symlink_to(target)
    return link


@_layout
def directory_relative(root: Path, outside: Path) -> list[Path]:
    return [_link(root / "models", os.path.relpath(outside, root))]


@_layout
def directory_absolute(root: Path, outside: Path) -> list[Path]:
    return [_link(root / "sub" / "models", outside)]


@_layout
def file_relative(root: Path, outside: Path) -> list[Path]:
    return [_link(root / "sub" / "model.pt", os.path.relpath(outside / "evil.pt", root / "sub"))]


@_layout
def file_absolute(root: Path, outside: Path) -> list[Path]:
    return [_link(root / "model.pt", outside / "evil.pt")]


@_layout
def chain(root: Path, outside: Path) -> list[Path]:
    last = _link(root / "sub" / "last", outside)
    return [_link(root / "first.pt", "sub/last/evil.pt"), last]


@_layout
def dangling(root: Path, outside: Path) -> list[Path]:
    return [_link(root / "gone.pt", outside / "not-there.pt")]


def _findings(output: str) -> list[dict[str, object]]:
    return [finding for result in json.loads(output)["results"] for finding in result["findings"]]


@pytest.mark.parametrize(
    ("layout", "follow"),
    [(layout, False) for layout in sorted(_LINKS)] + [(layout, True) for layout in ("directory_absolute", "directory_relative", "chain")],
)
def test_a_link_out_of_the_audited_tree_is_reported_not_followed(tmp_path: Path, layout: str, follow: bool) -> None:
    root, outside = _hostile_tree(tmp_path)
    links = _LINKS[layout](root, outside)
    if layout != "dangling":
        # The trap: the walk discovery made (links to files always, to directories with
        # --follow-symlinks) reaches the hostile file outside the upload.
        walked = [Path(top, name) for top, _, names in os.walk(root, followlinks=True) for name in names]
        assert (outside / "evil.pt").resolve() in [path.resolve() for path in walked]

    result = run_limited("audit", "--format", "json", *(["--follow-symlinks"] if follow else []), root)
    output = assert_judged(result)
    assert result.returncode == 1, output
    findings = _findings(result.stdout)
    escapes = [finding for finding in findings if finding["code"] == "CKS404"]
    assert sorted(str(finding["file"]) for finding in escapes) == sorted(map(str, links)), output
    for finding in escapes:
        assert str(outside) in str(finding["message"]) and "not followed" in str(finding["message"]), finding
    assert not [finding for finding in findings if finding["code"] == "CKS401"], "a file outside the tree was judged"
    assert all(str(outside) not in str(finding["checkpoint"]) for finding in findings)


def test_a_loop_of_links_is_named_and_not_searched(tmp_path: Path) -> None:
    root, _outside = _hostile_tree(tmp_path)
    _link(root / "ring.pt", "sub/ring.pt")
    _link(root / "sub" / "ring.pt", "../ring.pt")
    result = run_limited("audit", "--follow-symlinks", root)
    output = assert_judged(result)
    assert result.returncode == 1 and "ring.pt" in output and "a loop of symbolic links" in output, output


def test_links_inside_the_tree_are_judged_once(tmp_path: Path) -> None:
    root, _outside = _hostile_tree(tmp_path)
    _link(root / "last.pt", "own.pt")  # Lightning's save_last="link" writes such a link
    _link(root / "alias", "sub")
    torch.save({"w": torch.zeros(3)}, root / "sub" / "deep.pt")
    _adopt(root / "sub" / "deep.pt")

    result = run_limited("audit", "--format", "json", "--follow-symlinks", root)
    output = assert_judged(result)
    assert result.returncode == 0, output
    judged = [item["checkpoint"] for item in json.loads(result.stdout)["results"] if item["format"] is not None]
    assert sorted(Path(path).name for path in judged) == ["deep.pt", "own.pt"], judged
    skipped = {finding["checkpoint"]: finding["message"] for finding in _findings(result.stdout) if finding["code"] == "CKS015"}
    assert "judged under that name" in skipped[str(root / "last.pt")]


def test_a_link_swapped_in_after_discovery_is_not_read(tmp_path: Path) -> None:
    root, outside = _hostile_tree(tmp_path)
    found = discover([root])
    assert found.checkpoints == [root / "own.pt"]
    (root / "own.pt").unlink()
    _link(root / "own.pt", outside / "evil.pt")  # swapped between discovery and judging

    report = audit([root], discovery=found)
    codes = [finding.code for finding in report.findings]
    assert "CKS404" in codes and "CKS401" not in codes, [finding.message for finding in report.findings]
    assert "replaced by a link since it was found" in report.findings[codes.index("CKS404")].message


def test_a_link_swapped_in_while_judged_voids_the_verdict(tmp_path: Path) -> None:
    root, outside = _hostile_tree(tmp_path)
    checkpoint = root / "own.pt"

    def judge_then_swap(path: Path) -> Result:
        result = Result(checkpoint=str(path), format="torch", manifest=None, spec=None, findings=[])
        path.unlink()
        path.symlink_to(outside / "evil.pt")
        return result

    result = _judged_inside(judge_then_swap, {checkpoint: root.resolve()}, checkpoint)
    assert not result.passed
    assert [finding.code for finding in result.findings] == ["CKS404"]
    assert "while it was judged" in result.findings[0].message and str(outside) in result.findings[0].message
