"""The zip CRC-32 of torch.save records: `validate` checks every record no manifest CRC32C covers
(`data.pkl` above all) as `CKS209`, and `ckptspec manifest` refuses a file with any damaged record."""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from .conftest import LIGHTNING_SPEC, run_cli

from ckptspec import load_spec
from ckptspec.adopt import adopt
from ckptspec.formats.torchzip import open_torch_checkpoint

Copy = Callable[[Path], Path]

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")


def _record(path: Path, name: str) -> tuple[int, int, int]:
    """A record's stored CRC-32 and `[start, end)` of its bytes, by `zipfile` and the local header."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    *_, name_length, extra_length = _LOCAL_HEADER.unpack_from(path.read_bytes(), info.header_offset)
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    return info.CRC, start, start + info.file_size


def _flip(path: Path, name: str, needle: bytes = b"", at: int = 0, last: bool = False) -> str:
    """Flip a bit of byte `at` of `needle` inside record `name` (of its first byte when no needle);
    returns the `checksum mismatch: ...` text the reader reports for the record afterwards."""
    stored, start, end = _record(path, name)
    data = bytearray(path.read_bytes())
    found = data.rfind(needle, start, end) if last else data.find(needle, start, end)
    assert found >= 0, f"{needle!r} not in {name}"
    data[found + at] ^= 0x01
    path.write_bytes(bytes(data))
    computed = zlib.crc32(data[start:end])
    return f"checksum mismatch: stored crc32 {stored:08x}, computed {computed:08x} over bytes {start}..{end}"


def _findings(path: Path, *options: str | Path) -> tuple[int, list[dict[str, str]]]:
    code, out, _ = run_cli("validate", path, "--format", "json", *options)
    return code, json.loads(out)["results"][0]["findings"]


def test_a_flipped_hyper_parameter_float_is_a_stored_checksum_mismatch(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    mismatch = _flip(path, "archive/data.pkl", b"G" + struct.pack(">d", 0.05), at=8, last=True)
    code, findings = _findings(path)
    assert code == 1
    (finding,) = (f for f in findings if f["code"] == "CKS209")
    assert (finding["file"], finding["pointer"]) == (str(path), None)
    assert finding["message"] == f"{path.name}: record archive/data.pkl: {mismatch}"
    assert {f["code"] for f in findings} == {"CKS209", "CKS203", "CKS317"}  # also the file digest, the changed lr


def test_a_flipped_string_nothing_records_is_caught_by_the_crc_alone(
    lightning_checkpoint: Path, copy_of: Copy, tmp_path: Path
) -> None:
    spec = tmp_path / "no-digest.yaml"
    spec.write_text(LIGHTNING_SPEC + "integrity: {file_digest: none}\n")
    path = copy_of(lightning_checkpoint)
    adopt(path, load_spec(spec), force=True)
    mismatch = _flip(path, "archive/data.pkl", b"step=8.ckpt", at=5)  # ModelCheckpoint's best_model_path
    code, findings = _findings(path)
    assert (code, [(f["code"], f["message"]) for f in findings]) == (
        1,
        [("CKS209", f"{path.name}: record archive/data.pkl: {mismatch}")],
    )


def test_a_flipped_optimizer_state_byte_is_caught_without_a_file_digest(
    lightning_checkpoint: Path, copy_of: Copy, tmp_path: Path
) -> None:
    spec = tmp_path / "no-digest.yaml"
    spec.write_text(LIGHTNING_SPEC + "integrity: {file_digest: none}\n")
    path = copy_of(lightning_checkpoint)
    adopt(path, load_spec(spec), force=True)
    pointer = "/optimizer_states/0/state/0/exp_avg"  # no manifest CRC32C covers optimizer state
    with open_torch_checkpoint(path) as checkpoint:
        record = f"archive/{checkpoint.resolve(pointer).storage.record.name}"
    mismatch = _flip(path, record)
    code, findings = _findings(path)
    assert (code, [(f["code"], f["pointer"], f["message"]) for f in findings]) == (
        1,
        [("CKS209", pointer, f"{path.name}: {pointer[1:]}: record {record}: {mismatch}")],
    )


def test_validate_leaves_tensor_records_to_the_manifest_crc32c(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    _flip(path, "model/data/0")
    code, findings = _findings(path)
    assert code == 1
    assert {f["code"] for f in findings} == {"CKS207", "CKS203"}


def test_adoption_refuses_a_flipped_tensor_byte_naming_record_and_tensor(torch_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(torch_checkpoint)
    manifest = Path(f"{path}.ckptspec.yaml")
    manifest.unlink()
    mismatch = _flip(path, "model/data/0")
    code, _, err = run_cli("manifest", path)
    assert (code, err) == (
        1,
        f"error: {path}: not adopted, no manifest written:\n"
        f"  CKS209 stored-checksum-mismatch: {path.name}: model/0.weight: record model/data/0: {mismatch}\n",
    )
    assert not manifest.exists()


def test_adoption_refuses_a_lightning_file_with_a_damaged_pickle(lightning_checkpoint: Path, copy_of: Copy) -> None:
    path = copy_of(lightning_checkpoint)
    mismatch = _flip(path, "archive/data.pkl", b"kwargs", at=0)
    code, _, err = run_cli("manifest", path, "--force")
    assert (code, err.splitlines()[1:]) == (1, [f"  CKS209 stored-checksum-mismatch: {path.name}: record archive/data.pkl: {mismatch}"])


def test_a_clean_file_is_adopted_and_validates(lightning_checkpoint: Path, copy_of: Copy, specs: dict[str, Path]) -> None:
    path = copy_of(lightning_checkpoint)
    code, _, err = run_cli("manifest", path, "--spec", specs["lightning"], "--force")
    assert (code, err) == (0, f"wrote {path}.ckptspec.yaml\n")
    assert _findings(path)[0] == 0
