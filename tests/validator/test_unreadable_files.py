"""Files and directories the user may not read: named in a finding or a one-line error, never a
crash. Root reads everything, so these run the CLI as an ordinary user (see `run_cli_unprivileged`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .conftest import copy_checkpoint, run_cli_unprivileged

Copy = Callable[[Path], Path]


def _unreadable_shard(tf_checkpoints: dict[str, Path], copy: Copy) -> tuple[Path, Path]:
    path = copy(tf_checkpoints["latest"])
    shard = Path(f"{path}.data-00000-of-00001")
    shard.chmod(0)
    return path, shard


def test_validate_names_the_unreadable_shard_once(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path, shard = _unreadable_shard(tf_checkpoints, copy_of)
    code, out, _ = run_cli_unprivileged("validate", path, "--format", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1
    damage = [f for f in findings if f["family"] != "input" or f["code"] == "CKS001"]
    assert [(f["code"], f["file"]) for f in damage] == [("CKS211", str(shard))]
    assert "Permission denied" in damage[0]["message"]
    unchecked = sorted(f["message"].split(" not checked: ")[0] for f in findings if f["code"] == "CKS010")
    assert unchecked == [
        "CKS106 optimizer-state-absent",
        "CKS203 file-digest-mismatch",
        "CKS304 optimizer-hyperparameter-mismatch",
        "CKS306 optimizer-state-count-mismatch",
        "CKS314 data-position-mismatch",
    ]
    assert {f["code"] for f in findings} == {"CKS010", "CKS211"}


def test_adoption_and_diff_name_the_unreadable_shard(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path, shard = _unreadable_shard(tf_checkpoints, copy_of)
    manifest = Path(f"{path}.ckptspec.yaml")
    before = manifest.read_text()
    code, _, err = run_cli_unprivileged("manifest", path, "--force")
    assert code == 1 and err.startswith(f"error: {path}: not adopted, no manifest written:\n  CKS211 checkpoint-corrupt: {shard.name}: ")
    assert "Permission denied" in err and manifest.read_text() == before
    code, _, err = run_cli_unprivileged("diff", tf_checkpoints["latest"], path)
    assert (code, err) == (2, f"error: {shard}: cannot read: Permission denied\n")


def test_audit_reports_a_directory_it_cannot_search(torch_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "registry"
    readable = copy_checkpoint(torch_checkpoint, root / "open")
    copy_checkpoint(torch_checkpoint, root / "locked")
    (root / "locked").chmod(0)
    code, out, _ = run_cli_unprivileged("audit", root, "--format", "json")
    results = {r["checkpoint"]: r for r in json.loads(out)["results"]}
    assert code == 1 and set(results) == {str(readable), str(root / "locked")}
    assert results[str(readable)]["passed"]
    (finding,) = results[str(root / "locked")]["findings"]
    assert (finding["code"], finding["message"]) == ("CKS001", f"{root / 'locked'}: cannot read the directory: Permission denied")


def test_a_document_that_may_not_be_read_is_named_by_every_command(
    torch_checkpoint: Path, specs: dict[str, Path], tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(specs["torch"].read_text())
    spec.chmod(0)
    code, out, err = run_cli_unprivileged("lint", spec)
    assert (code, out, err) == (2, "", f"{spec}: cannot read: Permission denied\n")
    code, _, err = run_cli_unprivileged("validate", torch_checkpoint, "--spec", spec)
    assert (code, err) == (2, f"error: {spec}: cannot read: Permission denied\n")


def test_a_checkpoint_that_may_not_be_read_is_explained_by_the_reader(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    path.chmod(0)
    for command in ("validate", "manifest"):
        code, _, err = run_cli_unprivileged(command, path)
        assert (code, err) == (2, f"error: {path}: cannot read: Permission denied\n"), command
