"""What `audit` is given and finds: TensorFlow prefixes, DCP directories, and places it cannot
search, each in the report; nothing is skipped without a word."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .conftest import copy_checkpoint, run_cli


def _findings(out: str) -> dict[str, list[tuple[str, str]]]:
    return {r["checkpoint"]: [(f["code"], f["message"]) for f in r["findings"]] for r in json.loads(out)["results"]}


def test_a_tensorflow_prefix_is_audited(tf_checkpoints: dict[str, Path]) -> None:
    code, out, _ = run_cli("audit", tf_checkpoints["latest"], "--format", "json")
    assert (code, list(_findings(out).items())) == (0, [(str(tf_checkpoints["latest"]), [])])


def test_a_path_that_is_nothing_cannot_run(tmp_path: Path) -> None:
    code, out, err = run_cli("audit", tmp_path / "ckpt-9")
    assert (code, out, err) == (2, "", f"error: {tmp_path / 'ckpt-9'}: no such file, directory or TensorFlow checkpoint prefix\n")


def test_a_dcp_directory_is_one_checkpoint(unread_formats: dict[str, Path], torch_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "registry"
    copy_checkpoint(torch_checkpoint, root / "run-1")
    shutil.copytree(unread_formats["dcp"], root / "run-2")
    code, out, _ = run_cli("audit", root, "--format", "json")
    audited = {r["checkpoint"]: r for r in json.loads(out)["results"]}
    assert audited[str(root / "run-2")]["format"] == "dcp"
    assert [code for code, _ in _findings(out)[str(root / "run-2")]] == ["CKS002", "CKS004"]  # no manifest, no spec
    code, out, _ = run_cli("audit", root / "run-2", "--format", "json")
    assert list(_findings(out)) == [str(root / "run-2")]


def test_symbolic_link_loops_are_findings(torch_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "registry"
    checkpoint = copy_checkpoint(torch_checkpoint, root / "run-1")
    (root / "last.ckpt").symlink_to("last.ckpt")
    (root / "run-1" / "up").symlink_to("..")
    code, out, _ = run_cli("audit", root, "--format", "json", "--follow-symlinks")
    assert (code, _findings(out)) == (
        1,
        {
            str(checkpoint): [],
            str(root / "last.ckpt"): [("CKS001", f"{root / 'last.ckpt'}: a loop of symbolic links; nothing behind it can be read")],
            str(root / "run-1" / "up"): [
                ("CKS001", f"{root / 'run-1' / 'up'}: a symbolic link back to {root.resolve()}, which contains it (a loop)")
            ],
        },
    )
    code, out, _ = run_cli("audit", root, "--format", "json")
    not_followed = "a symbolic link to a directory; not followed (--follow-symlinks follows it)"
    assert _findings(out)[str(root / "run-1" / "up")] == [("CKS015", f"{root / 'run-1' / 'up'}: {not_followed}")]


def test_files_that_share_checkpoint_names_or_containers_are_listed_not_failed(torch_checkpoint: Path, tmp_path: Path) -> None:
    import numpy

    root = tmp_path / "package"
    copy_checkpoint(torch_checkpoint, root / "model")
    numpy.savez(root / "filters.npz", mel=numpy.ones((4, 8), dtype=numpy.float32), window=numpy.arange(3))
    numpy.savez_compressed(root / "compressed.npz", table=numpy.zeros(16))
    numpy.savez(root / "objects.npz", plain=numpy.arange(3), objects=numpy.array([{"a": 1}], dtype=object))
    (root / "weight.bin").write_bytes(b"\x00\x01CoreML weights" + bytes(range(256)) * 8)  # no checkpoint format
    (root / "ggml-model.bin").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(64))
    (root / "empty.bin").write_bytes(b"")
    code, out, _ = run_cli("audit", root, "--format", "json")
    codes = {Path(path).name: [code for code, _ in findings] for path, findings in _findings(out).items()}
    assert codes["filters.npz"] == codes["compressed.npz"] == codes["weight.bin"] == codes["ggml-model.bin"] == ["CKS015"]
    assert codes.get("objects.npz", []) == []  # its object array is judged: plain values, nothing to call
    assert codes["empty.bin"] == ["CKS001"]  # a checkpoint-named file that is empty is a broken save
    assert code == 1
