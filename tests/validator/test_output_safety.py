"""`--output` never replaces what the run judges: a checkpoint's files, its manifest, the spec."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from .conftest import run_cli

Copy = Callable[[Path], Path]
REFUSAL = "refusing to overwrite an input with the report (choose another --output)"


def test_validate_refuses_to_write_over_the_checkpoint(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    before = path.read_bytes()
    code, out, err = run_cli("validate", path, "-o", path)
    assert (code, out, err) == (2, "", f"error: {path}: is the checkpoint {path}; {REFUSAL}\n")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("output", "what"),
    [
        (".index", "a file of the checkpoint {path}"),
        (".data-00000-of-00001", "a file of the checkpoint {path}"),
        (".ckptspec.yaml", "the manifest of {path}"),
    ],
)
def test_validate_refuses_an_index_shard_or_manifest(tf_checkpoints: dict[str, Path], copy_of: Copy, output: str, what: str) -> None:
    path = copy_of(tf_checkpoints["latest"])
    target = Path(f"{path}{output}")
    before = target.read_bytes()
    code, _, err = run_cli("validate", path, "--output", target)
    assert (code, err) == (2, f"error: {target}: is {what.format(path=path)}; {REFUSAL}\n")
    assert target.read_bytes() == before


def test_a_link_to_the_checkpoint_is_the_checkpoint(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    link = path.parent / "report.txt"
    link.symlink_to(path.name)
    code, _, err = run_cli("validate", path, "-o", link)
    assert (code, err) == (2, f"error: {link}: is the checkpoint {path}; {REFUSAL}\n")


def test_audit_refuses_a_manifest_under_its_paths(lightning_checkpoint: Path, torch_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "registry"
    shutil.copytree(torch_checkpoint.parent, root / "torch")
    shutil.copytree(lightning_checkpoint.parent, root / "lightning")
    manifest = Path(f"{root / 'torch' / torch_checkpoint.name}.ckptspec.yaml")
    before = manifest.read_text()
    code, _, err = run_cli("audit", root, "-o", manifest)
    assert (code, err) == (2, f"error: {manifest}: is the manifest of {root / 'torch' / torch_checkpoint.name}; {REFUSAL}\n")
    assert manifest.read_text() == before


def test_audit_refuses_the_spec(torch_checkpoint: Path, tmp_path: Path, specs: dict[str, Path]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(specs["torch"].read_text())
    code, _, err = run_cli("audit", torch_checkpoint, "--spec", spec, "-o", spec)
    assert (code, err) == (2, f"error: {spec}: is the spec; {REFUSAL}\n")


def test_a_previous_report_is_replaced(torch_checkpoint: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}")
    for command in ("validate", "audit"):
        code, _, err = run_cli(command, torch_checkpoint, "--format", "json", "-o", report)
        assert (code, err) == (0, f"wrote {report}\n")
        assert report.read_text().startswith('{\n  "report": 1')
