"""File digests: CRC32C recorded at save time from the bytes written, verified by validate in the same
pass that checks the tensors; each byte read once, damage anywhere in the file (optimizer state
included) found and named, old SHA-256 manifests still verified."""

from __future__ import annotations

import hashlib
import logging
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest

from ckptspec import load_manifest, load_spec, validate
from ckptspec._sidecars import manifest_path_for
from ckptspec._pointer import join_pointer
from ckptspec._models import Spec
from ckptspec.adopt import adopt

from .conftest import LIGHTNING_SPEC, TF_SPEC, TORCH_SPEC, copy_checkpoint

Copy = Callable[[Path], Path]

CRC32C_SPEC = LIGHTNING_SPEC + "integrity: {file_digest: crc32c}\n"
BOTH_SPEC = LIGHTNING_SPEC + "integrity: {file_digest: sha256}\n"


def _spec(text: str) -> Spec:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "spec.yaml"
        path.write_text(text)
        return load_spec(path)


def _bytes_read() -> int:
    """Bytes this process has read through read(2) and its kin, page cache included."""
    with open("/proc/self/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


def _codes(path: Path) -> list[str]:
    return sorted(finding.code for finding in validate(path).findings if finding.severity == "error")


@pytest.fixture(scope="module")
def callback_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint and manifest written by a real `Trainer.fit` with the callback and a CRC32C spec."""
    pytest.importorskip("pytorch_lightning")
    from ckptspec.lightning import CkptspecCallback

    from ._lightning_training import fit

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit(tmp_path_factory.mktemp("callback"), [CkptspecCallback(spec=_spec(CRC32C_SPEC))])


def test_the_callback_records_the_crc32c_of_the_bytes_it_wrote(callback_checkpoint: Path) -> None:
    (entry,) = load_manifest(manifest_path_for(callback_checkpoint)).files
    data = callback_checkpoint.read_bytes()
    assert (entry.size, entry.crc32c, entry.sha256) == (len(data), f"{crc32c.crc32c(data):08x}", None)
    assert _codes(callback_checkpoint) == []


def test_the_callback_does_not_read_the_checkpoint_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytorch_lightning")
    import ckptspec._records
    from ckptspec.lightning import CkptspecCallback

    from ._lightning_training import fit

    def no_second_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("the checkpoint was read again to digest it")

    monkeypatch.setattr(ckptspec._records, "file_digests", no_second_pass)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = fit(tmp_path, [CkptspecCallback(spec=_spec(BOTH_SPEC))])
    (entry,) = load_manifest(manifest_path_for(checkpoint)).files
    assert entry.sha256 == hashlib.sha256(checkpoint.read_bytes()).hexdigest()


@pytest.mark.parametrize("digest", ["crc32c", "sha256"])
def test_torch_save_records_the_digest_of_the_written_bytes(tmp_path: Path, digest: str) -> None:
    torch = pytest.importorskip("torch")
    import ckptspec.torch

    model = torch.nn.Linear(256, 256)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    path = tmp_path / "step-1.pt"
    path.write_bytes(b"an older checkpoint, replaced")
    spec = _spec(TORCH_SPEC + f"integrity: {{file_digest: {digest}}}\n")
    before = _bytes_read()
    manifest = ckptspec.torch.save(path, model=model, optimizer=optimizer, scheduler=scheduler, spec=spec)
    read = _bytes_read() - before
    data = path.read_bytes()
    expected = {"crc32c": f"{crc32c.crc32c(data):08x}", "sha256": hashlib.sha256(data).hexdigest()}[digest]
    (entry,) = manifest.files
    assert (entry.size, getattr(entry, digest)) == (len(data), expected)
    assert read < len(data) // 2, f"save read {read} bytes back of a {len(data)}-byte file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1.pt", "step-1.pt.ckptspec.yaml"]


def test_validate_reads_each_byte_once(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    adopt(path, _spec(CRC32C_SPEC), force=True)
    size = path.stat().st_size
    validate(path)  # imports and the like, not part of the count
    before = _bytes_read()
    result = validate(path)
    read = _bytes_read() - before
    assert [f.code for f in result.findings if f.severity == "error"] == []
    manifest_bytes = manifest_path_for(path).stat().st_size
    # one pass over the checkpoint, the manifest, and the zip directory and data.pkl read to parse it
    assert read < size * 1.6 + manifest_bytes + 65536, f"validate read {read} bytes for a {size}-byte file"


def _flip_byte_in(path: Path, record_suffix: str) -> str:
    """Flip one byte inside the record whose name ends with `record_suffix`; the record's name."""
    with zipfile.ZipFile(path) as archive:
        info = next(info for info in archive.infolist() if info.filename.endswith(record_suffix))
    with path.open("r+b") as handle:
        handle.seek(info.header_offset + 26)
        name_length, extra_length = int.from_bytes(handle.read(2), "little"), int.from_bytes(handle.read(2), "little")
        position = info.header_offset + 30 + name_length + extra_length + info.compress_size // 2
        handle.seek(position)
        value = handle.read(1)[0]
        handle.seek(position)
        handle.write(bytes([value ^ 0x01]))
    return info.filename


def _flip_local_header_time(path: Path) -> None:
    """Damage bytes that no tensor and no record CRC-32 covers: a local header's modification time."""
    with zipfile.ZipFile(path) as archive:
        offset = archive.infolist()[-1].header_offset + 10
    with path.open("r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ 0x01]))


def _optimizer_record(path: Path) -> str:
    """The record suffix of an Adam moment tensor's storage (not covered by the manifest's CRC32Cs)."""
    from ckptspec.formats.torchzip import open_torch_checkpoint

    with open_torch_checkpoint(path) as checkpoint:
        pointer, tensor = next((p, t) for p, t in checkpoint.tensors() if p.startswith("/optimizer_states") and t.nbytes >= 4)
        return "/data/" + tensor.storage.key


@pytest.mark.parametrize("spec_text", [CRC32C_SPEC, BOTH_SPEC], ids=["crc32c", "sha256"])
def test_damage_in_optimizer_state_is_found_and_named(lightning_checkpoint: Path, copy_of: Copy, spec_text: str) -> None:
    path = copy_of(lightning_checkpoint)
    adopt(path, _spec(spec_text), force=True)
    record = _flip_byte_in(path, _optimizer_record(path))
    findings = [f for f in validate(path).findings if f.severity == "error"]
    assert sorted({f.code for f in findings}) == ["CKS203", "CKS209"]
    assert any(record in f.message for f in findings if f.code == "CKS209")


def test_damage_in_a_model_tensor_names_the_tensor(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    adopt(path, _spec(CRC32C_SPEC), force=True)
    from ckptspec.formats.torchzip import open_torch_checkpoint

    with open_torch_checkpoint(path) as checkpoint:
        pointer, tensor = next((p, t) for p, t in checkpoint.tensors() if p.startswith("/state_dict") and t.nbytes >= 4)
        suffix = "/data/" + tensor.storage.key
    _flip_byte_in(path, suffix)
    findings = [f for f in validate(path).findings if f.severity == "error"]
    assert {f.code for f in findings} >= {"CKS203", "CKS207"}
    assert any(f.pointer == pointer for f in findings if f.code == "CKS207")


def test_an_old_sha256_manifest_is_still_verified_under_a_crc32c_spec(lightning_checkpoint: Path, copy_of: Copy, tmp_path: Path) -> None:
    path = copy_of(lightning_checkpoint)
    adopt(path, _spec(BOTH_SPEC), force=True)
    spec_path = tmp_path / "crc32c.yaml"
    spec_path.write_text(CRC32C_SPEC)
    result = validate(path, spec_path)
    assert [f.code for f in result.findings if f.code in {"CKS203", "CKS215"}] == []
    _flip_local_header_time(path)
    codes = [f.code for f in validate(path, spec_path).findings]
    assert "CKS203" in codes


def test_a_copy_with_other_bytes_fails_the_crc32c(lightning_checkpoint: Path, tmp_path: Path) -> None:
    path = copy_checkpoint(lightning_checkpoint, tmp_path / "copy")
    adopt(path, _spec(CRC32C_SPEC), force=True)
    entry = load_manifest(manifest_path_for(path)).files[0]
    assert entry.crc32c == f"{crc32c.crc32c(path.read_bytes()):08x}"
    _flip_local_header_time(path)
    messages = [f.message for f in validate(path).findings if f.code == "CKS203"]
    assert len(messages) == 1 and "crc32c" in messages[0]


TF_CRC32C_SPEC = TF_SPEC + "integrity: {file_digest: crc32c}\n"


def test_a_sharded_bundle_with_crc32c_digests_validates_clean(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    prefix = copy_of(tf_checkpoints["sharded"])
    adopt(prefix, _spec(TF_CRC32C_SPEC), force=True)
    entries = load_manifest(manifest_path_for(prefix)).files
    assert len(entries) > 2 and all(entry.crc32c is not None and entry.sha256 is None for entry in entries)
    assert _codes(prefix) == []


def test_damage_in_a_shard_is_found_and_the_tensor_named(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    from ckptspec.formats.tfbundle import open_bundle

    prefix = copy_of(tf_checkpoints["sharded"])
    adopt(prefix, _spec(TF_CRC32C_SPEC), force=True)
    bundle = open_bundle(prefix)
    entry = max((e for e in bundle.entries.values() if not e.is_sliced), key=lambda e: e.size)
    shard = bundle.shard_path(entry.shard_id)
    with shard.open("r+b") as handle:
        handle.seek(entry.offset + entry.size // 2)
        value = handle.read(1)[0]
        handle.seek(entry.offset + entry.size // 2)
        handle.write(bytes([value ^ 0x01]))
    findings = [f for f in validate(prefix).findings if f.severity == "error"]
    assert {f.code for f in findings} >= {"CKS203", "CKS209"}
    assert any(shard.name in f.message for f in findings if f.code == "CKS203")
    assert any(entry.key in f.message or f.pointer == "/" + entry.key for f in findings if f.code == "CKS209")


def test_partitioned_tensors_are_not_read_again(tf_checkpoints: dict[str, Path], copy_of: Copy, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor sliced along one axis across shards gets its CRC32C from the pass over the shards, not
    from a second read (one sliced along two axes is assembled, and read again)."""
    from ckptspec.formats.tfbundle import Bundle, open_bundle

    prefix = copy_of(tf_checkpoints["sharded"])
    adopt(prefix, _spec(TF_CRC32C_SPEC), force=True)
    bundle = open_bundle(prefix)
    partitioned = {entry.key for entry in bundle.entries.values() if bundle.stored_runs(entry.key, 256) is not None}
    streamed: list[str] = []
    original = Bundle.iter_bytes

    def recording(self: Bundle, key: str):  # type: ignore[no-untyped-def]
        streamed.append(key)
        return original(self, key)

    monkeypatch.setattr(Bundle, "iter_bytes", recording)
    assert partitioned and _codes(prefix) == []
    assert not partitioned & set(streamed)


def test_damage_in_a_slice_names_the_partitioned_tensor(tf_checkpoints: dict[str, Path], copy_of: Copy) -> None:
    from ckptspec.formats.tfbundle import open_bundle

    prefix = copy_of(tf_checkpoints["sharded"])
    adopt(prefix, _spec(TF_CRC32C_SPEC), force=True)
    bundle = open_bundle(prefix)
    key, runs = next((entry.key, runs) for entry in bundle.entries.values() if (runs := bundle.stored_runs(entry.key, 256)))
    assert len(runs) > 1
    shard_id, offset, length = runs[-1]
    with bundle.shard_path(shard_id).open("r+b") as handle:
        handle.seek(offset + length // 2)
        value = handle.read(1)[0]
        handle.seek(offset + length // 2)
        handle.write(bytes([value ^ 0x01]))
    findings = [f for f in validate(prefix).findings if f.severity == "error"]
    assert any(f.pointer == join_pointer([key]) and f.code == "CKS207" for f in findings), [(f.code, f.pointer) for f in findings]


def test_audit_workers_judge_with_the_given_spec(lightning_checkpoint: Path, torch_checkpoint: Path, tmp_path: Path) -> None:
    """The spec reaches each worker once; `--jobs 2` judges exactly as `--jobs 1` does."""
    from ckptspec import audit

    root = tmp_path / "registry"
    for name, source in (("a", lightning_checkpoint), ("b", torch_checkpoint), ("c", lightning_checkpoint)):
        copy_checkpoint(source, root / name)
    spec_path = tmp_path / "strict.yaml"
    spec_path.write_text(CRC32C_SPEC.replace("fingerprint: {require: optional}", "fingerprint: {require: required}"))

    def judged(spec: Path | None, jobs: int) -> list[tuple[str, str, str]]:
        report = audit([root], spec, jobs=jobs)
        return sorted((Path(r.checkpoint).parent.name, f.code, f.message) for r in report.results for f in r.findings)

    serial = judged(spec_path, 1)
    assert serial != judged(None, 1)  # the given spec asks for more than the embedded ones
    assert judged(spec_path, 2) == serial
    assert judged(spec_path, 8) == serial  # more workers asked for than checkpoints: one each
