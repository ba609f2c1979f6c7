from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ckptspec import (
    DocumentError,
    Manifest,
    SchemaValidationError,
    Spec,
    UnsupportedVersionError,
    dump_document,
    load_document,
    load_manifest,
    load_spec,
    parse_document,
    save_document,
    spec_digest,
)
from ckptspec._documents import spec_digest_matches
from ckptspec._models import Requirement

SPEC_HEAD = 'ckptspec: "1.0"\nkind: spec\nname: demo\n'


def issues_of(text: str) -> list[str]:
    with pytest.raises(SchemaValidationError) as caught:
        parse_document(text, source="spec.yaml")
    return [issue.render("spec.yaml") for issue in caught.value.issues]


def test_minimal_spec_gets_documented_defaults() -> None:
    spec = parse_document(SPEC_HEAD)
    assert isinstance(spec, Spec)
    assert spec.components.model.require == Requirement.required.value
    assert spec.components.scheduler.require == Requirement.optional.value
    assert spec.components.rng.generators == ["python", "numpy", "torch"]
    assert spec.integrity.tensor_checksum == "crc32c"


def test_negative_tolerance_names_line_and_field() -> None:
    text = SPEC_HEAD + "components:\n  fingerprint:\n    atol: -1\n"
    assert issues_of(text) == ["spec.yaml:6:11: components.fingerprint.atol: must be >= 0.0, got -1"]


def test_typo_key_suggests_the_right_one() -> None:
    text = SPEC_HEAD + "components:\n  optimiser:\n    require: required\n"
    [message] = issues_of(text)
    assert message.startswith("spec.yaml:5:3: components.optimiser: unknown key; did you mean 'optimizer'?")


def test_wrong_type_and_bad_enum_are_all_reported() -> None:
    text = SPEC_HEAD + "components:\n  model: {require: maybe}\n  rng:\n    generators: torch\n"
    messages = issues_of(text)
    assert len(messages) == 2
    assert messages[0].startswith("spec.yaml:5:20: components.model.require: input should be 'required'")
    assert messages[1].startswith("spec.yaml:7:17: components.rng.generators: input should be a valid list")


def test_unquoted_version_asks_for_quotes() -> None:
    assert issues_of("ckptspec: 1.0\nkind: spec\nname: x\n") == [
        'spec.yaml:1:11: ckptspec: must be a MAJOR.MINOR string; quote it: ckptspec: "1.0"'
    ]


def test_missing_version_and_kind() -> None:
    assert issues_of("kind: spec\nname: x\n")[0].endswith('ckptspec: missing: every document starts with ckptspec: "1.2"')
    assert issues_of('ckptspec: "1.0"\nname: x\n')[0].endswith("kind: must be 'spec' or 'manifest', got None")


@pytest.mark.parametrize("version", ["2.0", "1.3", "10.0"])
def test_future_versions_are_refused(version: str) -> None:
    with pytest.raises(
        UnsupportedVersionError, match=f"^spec.yaml:1:11: ckptspec: written for ckptspec schema {version}, newer than the 1.2"
    ):
        parse_document(f'ckptspec: "{version}"\nkind: spec\nname: x\n', source="spec.yaml")


def test_a_document_must_be_a_mapping() -> None:
    assert issues_of("- a\n- b\n") == ["spec.yaml:1:1: <document>: a document must be a mapping of keys to values"]


def test_example_manifest_round_trips_byte_for_byte(repo: Path, tmp_path: Path) -> None:
    manifest = load_manifest(repo / "examples" / "manifest.yaml")
    saved = tmp_path / "m.yaml"
    save_document(manifest, saved)
    again = load_manifest(saved)
    assert again == manifest
    assert dump_document(again) == saved.read_text()


def test_load_spec_refuses_a_manifest(repo: Path) -> None:
    with pytest.raises(DocumentError, match="is a manifest, expected a spec"):
        load_spec(repo / "examples" / "manifest.yaml")


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="no such file"):
        load_document(tmp_path / "missing.yaml")
    with pytest.raises(DocumentError, match="is a directory"):
        load_document(tmp_path)


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with _writer_unblocking(fifo), pytest.raises(DocumentError) as caught:
        load_document(fifo)
    assert str(caught.value) == f"{fifo}: not a regular file but a FIFO (named pipe); a document is a YAML file"


@contextmanager
def _writer_unblocking(fifo: Path, after_s: float = 5.0) -> Iterator[None]:
    """Should the code under test open `fifo` after all, a writer arrives and ends the wait, so the
    test fails instead of hanging."""
    writer = threading.Timer(after_s, lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)))
    writer.start()
    try:
        yield
    finally:
        writer.cancel()


def test_manifest_rejects_bad_crc_and_negative_shape() -> None:
    text = (
        'ckptspec: "1.0"\nkind: manifest\nformat: torch\ncheckpoint: a.pt\ncreated: now\n'
        "producer: {ckptspec: 0.1.0}\ncomponents:\n  model:\n    at: /model\n    tensors:\n"
        "    - {name: w, dtype: float32, shape: [-1], crc32c: XYZ}\n"
    )
    with pytest.raises(SchemaValidationError) as caught:
        parse_document(text, source="m.yaml")
    paths = [issue.dotted_path for issue in caught.value.issues]
    assert paths == ["components.model.tensors[0].shape[0]", "components.model.tensors[0].crc32c"]


def test_spec_digest_depends_on_meaning_not_layout() -> None:
    compact = parse_document(SPEC_HEAD + "components: {fingerprint: {atol: 0.5}}\n")
    spaced = parse_document(SPEC_HEAD + "\ncomponents:\n  fingerprint:\n    atol: 0.5   # tolerance\n")
    other = parse_document(SPEC_HEAD + "components: {fingerprint: {atol: 0.25}}\n")
    assert isinstance(compact, Spec) and isinstance(spaced, Spec) and isinstance(other, Spec)
    assert spec_digest(compact) == spec_digest(spaced) != spec_digest(other)


def test_empty_defaults_are_fresh_for_every_document() -> None:
    first, second = (parse_document(SPEC_HEAD) for _ in range(2))
    assert isinstance(first, Spec) and isinstance(second, Spec)
    first.pickle.allow.append("myproject.config.TrainConfig")
    assert second.pickle.allow == [] and second.components.model.allow_missing == []
    manifest = Manifest(format="torch", checkpoint="a.pt", created="now", producer={"ckptspec": "0.1.0"})
    manifest.producer.frameworks["torch"] = "2.13"
    assert Manifest(format="torch", checkpoint="b.pt", created="now", producer={"ckptspec": "0.1.0"}).producer.frameworks == {}


def test_manifest_model_validates_on_assignment() -> None:
    manifest = Manifest(format="torch", checkpoint="a.pt", created="now", producer={"ckptspec": "0.1.0"})
    with pytest.raises(Exception, match="format"):
        manifest.format = "onnx"  # type: ignore[assignment]


def test_every_dtype_a_reader_reports_can_be_recorded() -> None:
    from ckptspec._models import DType
    from ckptspec.formats._tf_dtypes import DATA_TYPES
    from ckptspec.formats._tensors import DTYPE_ITEMSIZE

    recordable = {dtype.value for dtype in DType}
    reported = set(DTYPE_ITEMSIZE) | {dtype.name for dtype in DATA_TYPES.values()}
    assert reported - recordable == set()


# A 1.0 spec and the digest release 0.1.0 (schema 1.0) recorded for it in manifests; kept forever.
SPEC_1_0 = (
    'ckptspec: "1.0"\nkind: spec\nname: t\ncomponents: {config: {require: optional}, optimizer: {require: optional}, '
    "rng: {require: optional}, data_position: {require: optional}, fingerprint: {require: optional}}\n"
)
DIGEST_RECORDED_BY_1_0 = "6f9e5720ea18498a27afc70cab41cf68cddde147c362cafb0f995b683922011c"


def test_a_digest_recorded_by_a_1_0_release_still_matches_its_spec() -> None:
    spec = parse_document(SPEC_1_0, source="spec.yaml")
    assert spec_digest(spec) != DIGEST_RECORDED_BY_1_0  # the 1.1 fields now take part in the digest
    assert spec_digest_matches(spec, DIGEST_RECORDED_BY_1_0)
    signed = spec.model_copy(update={"signature": spec.signature.model_copy(update={"require": True})})
    assert not spec_digest_matches(signed, DIGEST_RECORDED_BY_1_0)  # a 1.1 field set differently is an edit
