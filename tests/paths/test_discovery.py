"""What `audit` finds: files judged by content whatever their names, every other file listed with a
reason, state files never followed out of the audited paths, linked directories only when asked."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import zlib
from pathlib import Path

import pytest

from ckptspec._discover import discover
from ckptspec.formats.detect import detect

from .conftest import run_cli


def _audit(*args: str | Path) -> tuple[int, dict[str, list[tuple[str, str]]]]:
    code, out, _err = run_cli("audit", *args, "--format", "json")
    results = json.loads(out)["results"]
    return code, {r["checkpoint"]: [(f["code"], f["message"]) for f in r["findings"]] for r in results}


def _codes(findings: list[tuple[str, str]]) -> set[str]:
    return {code for code, _message in findings}


def test_a_torch_zip_named_like_a_tf_data_shard_is_judged_as_a_torch_file(torch_file: Path, tmp_path: Path) -> None:
    shard = tmp_path / "model.data-00000-of-00001"
    shutil.copy(torch_file, shard)
    assert detect(shard).kind == "torch-zip"
    assert discover([tmp_path]).checkpoints == [shard]


@pytest.mark.parametrize("name", ["weights.bin", "model.pth.tar", "net.th", "model.joblib", "x.npy", "state", "ckpt.index"])
def test_a_pickle_under_any_name_is_judged(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    assert detect(path).kind == "pickle"
    code, findings = _audit(tmp_path)
    assert code == 0 and list(findings) == [str(path)]


def test_every_other_file_is_listed_with_its_reason(torch_file: Path, tmp_path: Path) -> None:
    shutil.copy(torch_file, tmp_path / "weights.pt")
    (tmp_path / "metrics.csv").write_text("epoch,loss\n0,1.5\n")
    (tmp_path / "packed.joblib").write_bytes(zlib.compress(pickle.dumps(os.system)))
    (tmp_path / "orphan.pt.ckptspec.yaml").write_text("kind: manifest\n")
    code, findings = _audit(tmp_path)
    assert code == 1
    assert _codes(findings[str(tmp_path / "weights.pt")]) == {"CKS002", "CKS004"}
    assert findings[str(tmp_path / "metrics.csv")] == [
        ("CKS015", f"{tmp_path / 'metrics.csv'}: no checkpoint format recognised by its content; no loader unpickles it")
    ]
    assert findings[str(tmp_path / "packed.joblib")] == [  # a compressed stream is opened and its pickle judged
        (
            "CKS401",
            f"{tmp_path / 'packed.joblib'}!(decompressed): pickle names posix.system (1×), which is not on the allow-list:"
            " loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)",
        )
    ]
    assert findings[str(tmp_path / "orphan.pt.ckptspec.yaml")] == [
        ("CKS015", f"{tmp_path / 'orphan.pt.ckptspec.yaml'}: a manifest whose checkpoint orphan.pt is not here")
    ]


def test_a_torchscript_file_is_judged_whatever_its_name(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "model.jit")
    code, findings = _audit(tmp_path)
    assert code == 1 and "CKS415" in [code for code, _m in findings[str(tmp_path / "model.jit")]]


def test_a_fifo_and_a_link_to_a_device_are_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "checkpoint")
    os.mkfifo(tmp_path / "model.bin")
    (tmp_path / "zeros.pt").symlink_to("/dev/zero")
    code, findings = _audit(tmp_path)  # opening the FIFOs would block; reading /dev/zero never ends
    assert code == 1
    for name in ("checkpoint", "model.bin"):
        [(rule, message)] = findings[str(tmp_path / name)]
        assert rule == "CKS001" and "not a regular file but a FIFO (named pipe)" in message
    [(rule, message)] = findings[str(tmp_path / "zeros.pt")]  # a link out of the tree is never opened
    assert rule == "CKS404" and "links to /dev/zero, outside" in message


def test_a_state_file_pointing_out_of_the_audited_tree_is_a_finding_never_followed(tf1_empty_prefix: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(tf1_empty_prefix, elsewhere)
    audited = tmp_path / "upload"
    audited.mkdir()
    (audited / "checkpoint").write_text(f'model_checkpoint_path: "{elsewhere}/"\nall_model_checkpoint_paths: "../elsewhere/"\n')
    code, findings = _audit(audited)
    assert code == 1 and list(findings) == [str(audited / "checkpoint")]
    [(rule, message)] = findings[str(audited / "checkpoint")]
    assert rule == "CKS013" and message.count("it was not followed") == 2


def test_a_dangling_state_file_pointer_is_one_finding_on_the_state_file(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-11"\n')
    code, findings = _audit(tmp_path)
    assert code == 0 and list(findings) == [str(tmp_path / "checkpoint")]
    assert [rule for rule, _m in findings[str(tmp_path / "checkpoint")]] == ["CKS014"]


def test_a_linked_directory_out_of_the_tree_is_never_followed(torch_file: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(torch_file, outside / "weights.pt")
    audited = tmp_path / "upload"
    audited.mkdir()
    (audited / "linked").symlink_to(outside)
    for follow_symlinks in (False, True):
        found = discover([audited], follow_symlinks=follow_symlinks)
        [not_followed] = found.not_judged
        assert found.checkpoints == []
        assert (not_followed.path, not_followed.rule.code) == (audited / "linked", "CKS404")
        assert f"links to {outside}, outside {audited}" in not_followed.reason


def test_audit_help_lists_every_kind_it_recognises() -> None:
    from ckptspec.formats.detect import FORMATS

    _code, out, _err = run_cli("audit", "--help")
    assert all(f"- {found.name}: {found.description}" in out for found in FORMATS)


def test_a_manifest_entry_linked_out_of_the_directory_is_reported_never_read(torch_file: Path, tmp_path: Path) -> None:
    from ckptspec._validate import validate

    checkpoint = tmp_path / "weights.pt"
    shutil.copy(torch_file, checkpoint)
    assert run_cli("manifest", checkpoint)[0] == 0
    manifest = Path(f"{checkpoint}.ckptspec.yaml")
    (tmp_path / "zeros.bin").symlink_to("/dev/zero")  # hashing it would never end
    manifest.write_text(manifest.read_text().replace("files:\n", "files:\n- path: zeros.bin\n  size: 1\n  sha256: '" + "0" * 64 + "'\n", 1))
    findings = [(f.code, f.message) for f in validate(checkpoint).findings if f.code not in ("CKS004", "CKS005")]
    assert findings == [("CKS404", "zeros.bin: links to /dev/zero, outside " + str(tmp_path.resolve()))]


def test_tensor_bytes_that_open_like_a_pickle_stay_a_data_shard(tmp_path: Path) -> None:
    shard = tmp_path / "ckpt.data-00000-of-00001"
    shard.write_bytes(b"\x80\x02\x00\x00" * 4)  # four int32 640s
    assert detect(shard).kind == "tf-bundle"


def test_a_tree_without_a_checkpoint_is_a_usage_error_not_a_pass(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("epoch,loss\n")
    code, out, err = run_cli("audit", tmp_path)
    assert (code, out) == (2, "") and f"no checkpoints found under {tmp_path} (1 other files, none a checkpoint)" in err
