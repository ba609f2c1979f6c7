"""`ckptspec manifest` (adoption) records only checkpoints it can vouch for, by the names they have
in their directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from .._payloads import SystemCall
from .conftest import copy_checkpoint, run_cli

from ckptspec import load_manifest, validate

Copy = Callable[[Path], Path]


def _without_manifest(path: Path) -> Path:
    manifest = Path(f"{path}.ckptspec.yaml")
    manifest.unlink()
    return manifest


def test_a_checkpoint_linked_from_another_directory(torch_checkpoint: Path, tmp_path: Path, specs: dict[str, Path]) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    link = registry / "model.pt"
    link.symlink_to(torch_checkpoint)
    code, _, err = run_cli("manifest", link, "--spec", specs["torch"])
    assert (code, err) == (0, f"wrote {link}.ckptspec.yaml\n")
    assert [entry.path for entry in load_manifest(f"{link}.ckptspec.yaml").files] == ["model.pt"]
    assert {f.code for f in validate(link).findings} == {"CKS404"}
    code, out, _ = run_cli("diff", link, torch_checkpoint)
    assert (code, out.splitlines()[-1]) == (0, "no differences")


def test_truncated_shard_is_refused(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    path = copy_of(tf_checkpoints["latest"])
    manifest = _without_manifest(path)
    shard = Path(f"{path}.data-00000-of-00001")
    os.truncate(shard, 100)
    code, _, err = run_cli("manifest", path)
    assert code == 1 and not manifest.exists()
    lines = err.splitlines()
    assert lines[0] == f"error: {path}: not adopted, no manifest written:"
    assert lines[1].startswith(f"  CKS211 checkpoint-corrupt: {shard.name}: _CHECKPOINTABLE_OBJECT_GRAPH: ")
    assert all(line.startswith(f"  CKS211 checkpoint-corrupt: {shard.name}: ") for line in lines[1:])


def test_checksum_mismatch_and_missing_shard_are_refused(tf_checkpoints: dict[str, Path], copy_of: Copy, tmp_path: Path) -> None:
    flipped = copy_of(tf_checkpoints["latest"])
    _without_manifest(flipped)
    shard = Path(f"{flipped}.data-00000-of-00001")
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x10
    shard.write_bytes(data)
    code, _, err = run_cli("manifest", flipped)
    assert code == 1 and "\n  CKS209 stored-checksum-mismatch: " in err
    sharded = copy_checkpoint(tf_checkpoints["sharded"], tmp_path / "sharded")
    _without_manifest(sharded)
    Path(f"{sharded}.data-00001-of-00005").unlink()
    code, _, err = run_cli("manifest", sharded)
    assert code == 1 and "\n  CKS210 shard-missing: " in err and not Path(f"{sharded}.ckptspec.yaml").exists()


def test_dangerous_pickle_global_is_refused(torch_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    path = copy_of(torch_checkpoint)
    manifest = _without_manifest(path)
    checkpoint = torch.load(path, weights_only=False)
    torch.save({**checkpoint, "evil": SystemCall(f"touch {tmp_path / 'pwned'}")}, path)
    code, _, err = run_cli("manifest", path)
    assert (code, err) == (
        1,
        f"error: {path}: not adopted, no manifest written:\n"
        f"  CKS401 dangerous-pickle-global: pickle names {os.system.__module__}.system (1×), which is not on the allow-list: loading it runs that code\n",
    )
    assert not manifest.exists() and not (tmp_path / "pwned").exists()


def test_without_a_spec_validate_checks_what_the_manifest_records(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    code, _, err = run_cli("manifest", path, "--force")
    assert (code, err) == (
        0,
        f"wrote {path}.ckptspec.yaml\n"
        "note: the manifest embeds no spec; `ckptspec validate` checks what it records and warns (CKS004 spec-missing) "
        "that completeness against a declared policy is not checked until you pass --spec\n",
    )


def test_spec_help_says_what_adoption_does_with_it() -> None:
    _, out, _ = run_cli("manifest", "--help")
    assert "Embed this spec in the manifest" in out and "instead of the one embedded" not in out
