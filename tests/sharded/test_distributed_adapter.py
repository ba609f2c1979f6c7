"""`ckptspec.torch.save_sharded` / `restore_sharded` on 2 real ranks: each rank's generators come
back to that rank, the manifest is written after the save, another world size is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptspec import validate
from ckptspec._documents import load_manifest
from ckptspec._scan import file_digests
from ckptspec.signing import Trust

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def round_trip(fsdp_dir: Path) -> tuple[Path, list[dict]]:
    """The round trip the two ranks that wrote `fsdp_dir` made beside it."""
    directory = fsdp_dir.with_name(f"{fsdp_dir.name}-adapter")
    return directory, [json.loads(Path(f"{directory}.rank{rank}.json").read_text()) for rank in range(2)]


def test_each_rank_gets_its_own_generators_back(round_trip: tuple[Path, list[dict]]) -> None:
    _, ranks = round_trip
    for result in ranks:
        assert result["after_restore"] == result["after_save"]
        assert result["report"] == [2, 2, True]
        assert result["weights"][0] == pytest.approx(result["weights"][1])
    assert ranks[0]["after_restore"] != ranks[1]["after_restore"]  # rank 0's state was not restored everywhere


def test_manifest_written_after_the_commit_validates(round_trip: tuple[Path, list[dict]]) -> None:
    directory, _ = round_trip
    assert directory.with_name(f"{directory.name}.ckptspec.yaml").is_file()
    codes = {finding.code for finding in validate(directory).findings}
    assert codes <= {"CKS004", "CKS242"}, codes


@pytest.mark.parametrize(("suffix", "algorithm"), [("", "sha256"), ("-crc32c", "crc32c")])
def test_files_carry_the_digest_the_spec_names(round_trip: tuple[Path, list[dict]], suffix: str, algorithm: str) -> None:
    """Each rank digests the files it wrote, in the pass that checksums its chunks: SHA-256 without
    a spec (the schema's default), only CRC32C under a spec that names it."""
    directory = round_trip[0].with_name(f"{round_trip[0].name}{suffix}")
    entries = load_manifest(directory.with_name(f"{directory.name}.ckptspec.yaml")).files
    assert {entry.path for entry in entries} >= {f"{directory.name}/__0_0.distcp", f"{directory.name}/__1_0.distcp"}
    for entry in entries:
        other = "crc32c" if algorithm == "sha256" else "sha256"
        assert getattr(entry, other) is None
        assert getattr(entry, algorithm) == getattr(file_digests(directory.parent / entry.path, (algorithm,)), algorithm)
    # the CRC32C save is also signed, and no trusted key is given here: CKS254 says it was not verified
    assert {finding.code for finding in validate(directory).findings} <= {"CKS004", "CKS242", "CKS254"}


def test_the_manifest_records_the_generators_a_spec_requires(round_trip: tuple[Path, list[dict]]) -> None:
    directory = round_trip[0].with_name(f"{round_trip[0].name}-crc32c")
    manifest = load_manifest(directory.with_name(f"{directory.name}.ckptspec.yaml"))
    assert manifest.spec is not None and manifest.spec.document.components.rng.require == "required"
    assert {generator.name: generator.at for generator in manifest.components.rng.generators} == {
        name: f"/ckptspec/rng/rank0/{name}" for name in ("python", "numpy", "torch")
    }
    assert not [finding for finding in validate(directory).findings if finding.family == "completeness"]


def test_a_spec_the_save_cannot_meet_is_refused_before_anything_is_written(round_trip: tuple[Path, list[dict]]) -> None:
    directory, ranks = round_trip
    for rank in ranks:
        assert "spec 'starter' cannot be met by save_sharded" in rank["starter_refusal"]
        for component in ("config", "data_position", "fingerprint"):
            assert f"components.{component} is required, but save_sharded never records it" in rank["starter_refusal"]
    assert not directory.with_name(f"{directory.name}-starter").exists()


def test_another_world_size_is_refused_unless_resharding(round_trip: tuple[Path, list[dict]]) -> None:
    _, ranks = round_trip
    assert "saved by 2 ranks, restoring on 1" in ranks[0]["refused"]
    rng_restored, weight_sum = ranks[0]["resharded"]
    assert rng_restored is False and weight_sum == pytest.approx(ranks[0]["weights"][0])


def test_rank_zero_signs_the_whole_directory_with_its_manifest(round_trip: tuple[Path, list[dict]], tmp_path: Path) -> None:
    source = round_trip[0].with_name(f"{round_trip[0].name}-crc32c")
    signed = tmp_path / source.name
    shutil.copytree(source, signed)
    for suffix in (".ckptspec.yaml", ".sig", ".key.pub"):
        shutil.copy2(f"{source}{suffix}", f"{signed}{suffix}")
    trust = Trust(keys=(Path(f"{signed}.key.pub"),), required=True)
    assert not [f for f in validate(signed, trust=trust).findings if f.code.startswith("CKS25")]
    shard = next(signed.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes() + b"\0")
    findings = validate(signed, trust=trust).findings
    assert any(f.code == "CKS253" and shard.name in f.message for f in findings), findings
