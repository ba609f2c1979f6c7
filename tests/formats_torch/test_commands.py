"""`inspect`, `manifest`, `validate`, `audit` and `diff` accept legacy torch and safetensors files;
damage to a tensor's bytes is named to that tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptspec._views.open import open_view

from ._cli import WEIGHTS_SPEC, run

@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory, legacy_corpus: dict[str, Path], safetensors_corpus: dict[str, Path]) -> dict[str, Path]:
    """Copies with manifests written against a weights-only spec."""
    directory = tmp_path_factory.mktemp("adopted")
    spec = directory / "weights.yaml"
    spec.write_text(WEIGHTS_SPEC)
    shutil.copytree(safetensors_corpus["index"].parent, directory / "sharded")
    paths = {
        "legacy": shutil.copy(legacy_corpus["model.pth"], directory / "model.pth"),
        "safetensors": shutil.copy(safetensors_corpus["model.safetensors"], directory / "model.safetensors"),
        "sharded": directory / "sharded" / "model.safetensors.index.json",
    }
    for path in paths.values():
        code, output = run("manifest", path, "--spec", spec)
        assert code == 0, output
    return {name: Path(path) for name, path in paths.items()}


@pytest.mark.parametrize("name", ["legacy", "safetensors", "sharded"])
def test_adopted_copy_validates_clean(adopted: dict[str, Path], name: str) -> None:
    code, output = run("validate", adopted[name])
    assert code == 0, output
    code, output = run("inspect", adopted[name], "--format", "json", "--tensors")
    assert code == 0, output
    assert json.loads(output)["summary"]["tensor_count"] > 0


@pytest.mark.parametrize("name", ["legacy", "safetensors", "sharded"])
def test_a_flipped_tensor_byte_is_named_to_the_tensor(adopted: dict[str, Path], tmp_path: Path, name: str) -> None:
    source = adopted[name]
    copy_dir = tmp_path / "copy"
    shutil.copytree(source.parent, copy_dir)
    path = copy_dir / source.name
    with open_view(path) as view:
        pointer, tensor = next((p, t) for p, t in view.tensors.items() if t.shape and all(t.shape))
        victim = tensor.file
    with open_view(path) as view:
        ref = view.resolve(pointer)
        start, _ = ref.byte_range
    data = bytearray(victim.read_bytes())
    data[start] ^= 0xFF
    victim.write_bytes(bytes(data))
    code, output = run("validate", path, "--format", "json")
    assert code == 1
    findings = json.loads(output)["results"][0]["findings"]
    assert any(f["code"] == "CKS207" and pointer in json.dumps(f) for f in findings), output


def test_audit_finds_each_format_by_its_files(adopted: dict[str, Path]) -> None:
    code, output = run("audit", adopted["legacy"].parent, "--format", "json")
    assert code == 0, output
    results = json.loads(output)["results"]
    judged = {Path(r["checkpoint"]).name for r in results if not any(f["code"] == "CKS015" for f in r["findings"])}
    assert judged == {"model.pth", "model.safetensors", "model.safetensors.index.json"}
    assert {Path(r["checkpoint"]).name for r in results} - judged == {"weights.yaml"}  # listed, not judged


def test_diff_across_formats_of_one_state(legacy_corpus: dict[str, Path], safetensors_corpus: dict[str, Path]) -> None:
    code, output = run("diff", legacy_corpus["model.pth"], safetensors_corpus["index"])
    assert code == 0, output
    assert "no differences" in output


@pytest.mark.parametrize("content", [b"\x00" * 8 + b"{", b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02"])
def test_malformed_input_exits_2_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    code, output = run("inspect", path)
    assert code == 2, output
    assert str(path) in output and "Traceback" not in output


def test_a_report_is_never_written_over_a_shard(adopted: dict[str, Path]) -> None:
    index = adopted["sharded"]
    shard = index.parent / "model-00001-of-00002.safetensors"
    before = shard.read_bytes()
    code, output = run("audit", index.parent, "--output", shard)
    assert code == 2, output
    assert shard.read_bytes() == before
