"""Hostile and damaged Keras files: a clear error naming the file and what is wrong, never a traceback,
never a read outside the file."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError, validate
from ckptspec._exceptions import CorruptCheckpointError, ReaderError, UnsupportedFormatError
from ckptspec._validate import audit
from ckptspec.cli import cli
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.keras import open_keras

from .keras_written import KerasRun

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")


def _secret(tmp_path: Path) -> Path:
    """A file elsewhere on the machine that a hostile upload would like to read."""
    outside = tmp_path / "elsewhere" / "secret.h5"
    outside.parent.mkdir()
    with h5py.File(outside, "w") as handle:
        handle["data"] = np.arange(4, dtype=np.float32)
    return outside


def _weights(tmp_path: Path, build: object) -> Path:
    path = tmp_path / "upload.weights.h5"
    with h5py.File(path, "w") as handle:
        handle["layers/dense/vars/0"] = np.ones((2, 2), dtype=np.float32)
        build(handle)  # type: ignore[operator]
    return path


def _virtual(handle: h5py.File, source: Path) -> None:
    layout = h5py.VirtualLayout(shape=(4,), dtype="f4")
    layout[:] = h5py.VirtualSource(str(source), "data", shape=(4,))
    handle.create_virtual_dataset("layers/dense/vars/1", layout)


def _long_type_name(handle: h5py.File, secret: Path) -> None:
    handle["layers/dense/vars/1"] = np.zeros(4, dtype="V2")
    handle["layers/dense/vars/1"].attrs["dtype"] = "bfloat16" + " " * (1 << 20)


REFUSED = {
    "external link": (lambda handle, secret: handle.__setitem__("layers/leak", h5py.ExternalLink(str(secret), "/data")), "external link"),
    "soft link": (lambda handle, secret: handle.__setitem__("layers/alias", h5py.SoftLink("/layers/dense")), "soft link"),
    "external storage": (
        lambda handle, secret: handle.create_dataset("layers/dense/vars/1", shape=(16,), dtype="u1", external=[(str(secret), 0, 16)]),
        "external files",
    ),
    "virtual dataset": (_virtual, "virtual dataset"),
    "string dataset": (lambda handle, secret: handle.__setitem__("layers/dense/vars/1", b"text"), "not a number"),
    "opaque dataset with a long type name": (_long_type_name, "not a number"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_hdf5_features_that_reach_outside_the_file_are_refused(tmp_path: Path, case: str) -> None:
    secret = _secret(tmp_path)
    build, reason = REFUSED[case]
    path = _weights(tmp_path, lambda handle: build(handle, secret))
    with pytest.raises(ReaderError, match=reason) as raised:
        open_keras(path)
    assert str(path) in str(raised.value)
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 2 and reason in result.stderr and "Traceback" not in result.output


def test_truncated_files_are_named_as_damaged(keras_run: KerasRun, tmp_path: Path) -> None:
    for source in (keras_run.backup, keras_run.best[-1]):
        damaged = tmp_path / source.name
        damaged.write_bytes(source.read_bytes()[: source.stat().st_size * 2 // 3])
        with pytest.raises(CorruptCheckpointError, match=str(damaged)):
            inspect_checkpoint(damaged)
        unreadable = [finding for finding in validate(damaged).findings if finding.name == "checkpoint-unreadable"]
        assert len(unreadable) == 1 and str(damaged) in unreadable[0].message


def _rewrite(source: Path, target: Path, compress: dict[str, int], config: str | None = None) -> Path:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = old.read(info.filename)
            if info.filename == "config.json" and config is not None:
                data = config.encode()
            new.writestr(info.filename, data, compress_type=compress.get(info.filename, zipfile.ZIP_STORED))
    return target


def test_archive_members_compressed_by_another_tool(keras_run: KerasRun, tmp_path: Path) -> None:
    source = keras_run.best[-1]
    weights_deflated = _rewrite(source, tmp_path / "a.keras", {"model.weights.h5": zipfile.ZIP_DEFLATED})
    with pytest.raises(UnsupportedFormatError, match="model.weights.h5 is compressed"):
        open_keras(weights_deflated)
    config_deflated = _rewrite(source, tmp_path / "b.keras", {"config.json": zipfile.ZIP_DEFLATED})
    with open_keras(config_deflated) as keras_file, open_keras(source) as original:
        assert keras_file.layers == original.layers
        assert sorted(keras_file.tensors) == sorted(original.tensors)


@pytest.mark.parametrize(
    ("config", "reason"),
    [("[" * 100_000 + "]" * 100_000, "not valid JSON"), (" " * (17 << 20) + "{}", "more than"), ("{", "not valid JSON")],
    ids=["deep", "huge", "broken"],
)
def test_hostile_config_json(keras_run: KerasRun, tmp_path: Path, config: str, reason: str) -> None:
    path = _rewrite(keras_run.best[-1], tmp_path / "hostile.keras", {"config.json": zipfile.ZIP_DEFLATED}, config)
    with pytest.raises(CorruptCheckpointError, match=reason):
        open_keras(path)


def test_a_lambda_layer_is_reported_as_code(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Lambda(lambda x: x * 2), keras.layers.Dense(1)])
    path = tmp_path / "lambda.keras"
    model.save(path)
    dangerous = [ref for ref in inspect_checkpoint(path).globals if ref.safety == "dangerous"]
    assert sorted(ref.name for ref in dangerous) == ["Lambda", "__lambda__"]
    dangerous_findings = [finding for finding in validate(path).findings if finding.name == "dangerous-pickle-global"]
    assert sorted(finding.message.split(" (")[0] for finding in dangerous_findings) == [
        "config.json names keras.__lambda__",
        "config.json names keras.layers.Lambda",
    ]


def test_a_custom_class_is_dangerous_code(keras_run: KerasRun, tmp_path: Path) -> None:
    with zipfile.ZipFile(keras_run.best[-1]) as archive:
        config = json.loads(archive.read("config.json"))
    config["config"]["layers"][1]["module"] = "attacker.layers"
    path = _rewrite(keras_run.best[-1], tmp_path / "custom.keras", {}, json.dumps(config))
    dangerous = [ref.qualname for ref in inspect_checkpoint(path).globals if ref.safety == "dangerous"]
    assert dangerous == ["attacker.layers.Dense"]  # loading the model imports and builds it


def test_audit_finds_keras_files_by_content_and_reports_damage(keras_run: KerasRun, tmp_path: Path) -> None:
    shutil.copy(keras_run.best[-1], tmp_path / "model.zip")
    shutil.copy(keras_run.backup, tmp_path / "weights.bin")
    (tmp_path / "broken.keras").write_bytes(b"PK\x03\x04 not really")
    results = {Path(result.checkpoint).name: result for result in audit([tmp_path]).results}
    assert results["model.zip"].format == results["weights.bin"].format == "keras"
    unreadable = [finding for finding in results["broken.keras"].findings if finding.name == "checkpoint-unreadable"]
    assert len(unreadable) == 1 and "broken.keras" in unreadable[0].message


@pytest.fixture(scope="module")
def fuzz_sources(keras_run: KerasRun) -> list[bytes]:
    return [keras_run.backup.read_bytes(), keras_run.best[-1].read_bytes()]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_one_damaged_byte_never_escapes_as_another_error(
    fuzz_sources: list[bytes], tmp_path: Path, which: int, position: float, value: int
) -> None:
    damaged = bytearray(fuzz_sources[which])
    damaged[int(position * len(damaged))] = value
    path = tmp_path / ("fuzzed.weights.h5", "fuzzed.keras")[which]
    path.write_bytes(bytes(damaged))
    try:
        inspection = inspect_checkpoint(path)
    except CkptspecError:
        return
    assert inspection.format == "keras"
    for finding in validate(path).findings:
        assert finding.name != "internal-check-error", finding.message


def test_a_cycle_of_hard_links_lists_each_dataset_once(tmp_path: Path) -> None:
    path = tmp_path / "cycle.weights.h5"
    with h5py.File(path, "w") as handle:
        handle["layers/dense/vars/0"] = np.ones(3, dtype=np.float32)
        handle["layers/dense/again"] = handle["layers"]  # a group that contains itself
        handle["layers/copy"] = handle["layers/dense/vars/0"]
    with open_keras(path) as keras_file:
        (only,) = keras_file.tensors  # two hard links to one dataset: listed once, under the first path met
        assert only in {"layers/copy", "layers/dense/vars/0"}


def test_a_member_whose_local_header_names_another_file_is_refused(keras_run: KerasRun, tmp_path: Path) -> None:
    raw = bytearray(keras_run.best[-1].read_bytes())
    local = raw.find(b"config.json")  # the first occurrence is the member's local header
    raw[local : local + len("config.json")] = b"config.jsoN"
    path = tmp_path / "forged.keras"
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="the zip directory and the member disagree"):
        open_keras(path)


def test_a_dataset_never_written_is_damage_named_to_the_tensor(tmp_path: Path) -> None:
    path = tmp_path / "empty.weights.h5"
    with h5py.File(path, "w") as handle:
        handle["layers/dense/vars/0"] = np.ones(3, dtype=np.float32)
        handle.create_dataset("layers/dense/vars/1", shape=(3,), dtype="f4")
    findings = [finding for finding in validate(path).findings if finding.name == "checkpoint-corrupt"]
    assert [finding.pointer for finding in findings] == ["/layers~1dense~1vars~11"]
    assert "never written" in findings[0].message
