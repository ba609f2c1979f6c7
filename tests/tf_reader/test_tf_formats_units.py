"""The pieces under the bundle reader, on hand-made bytes: no TensorFlow needed."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from .tf_bundle_edit import (
    encode_entry,
    encode_header,
    message_field,
    string_tensor,
    varint,
    varint_field,
    write_table,
)

from ckptspec._exceptions import CorruptCheckpointError, ReaderError
from ckptspec.formats._protobuf import ProtobufDecodeError, as_int32, as_int64, iter_fields, read_varint, unpack_varints
from ckptspec.formats.sstable import SSTable, mask_crc, unmask_crc
from ckptspec.formats.tf_state import latest_checkpoint, list_checkpoints, read_checkpoint_state
from ckptspec.formats.tfbundle import (
    DATA_TYPES,
    BundleEntry,
    DataType,
    SliceExtent,
    TensorSlice,
    open_bundle,
    verify_bundle,
)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varints_round_trip(value: int) -> None:
    encoded = varint(value)
    assert read_varint(encoded + b"tail", 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_negative_int64_is_ten_bytes_and_decodes(value: int) -> None:
    ((number, _wire, raw),) = iter_fields(varint_field(4, value))
    assert (number, as_int64(raw)) == (4, value)


def test_negative_int32_is_sign_extended() -> None:
    ((_number, _wire, raw),) = iter_fields(varint_field(1, -5))
    assert as_int32(raw) == -5


def test_packed_varints() -> None:
    assert unpack_varints(varint(1) + varint(300) + varint(2**40)) == [1, 300, 2**40]


@pytest.mark.parametrize("damaged", [b"\x80", b"\xff" * 11, varint(2 << 3 | 2) + varint(9) + b"ab", varint(1 << 3 | 3)])
def test_malformed_messages_raise(damaged: bytes) -> None:
    with pytest.raises(ProtobufDecodeError):
        list(iter_fields(damaged))


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_crc_mask_round_trips(crc: int) -> None:
    assert unmask_crc(mask_crc(crc)) == crc


def test_every_dtype_has_a_distinct_name() -> None:
    values = [dtype for enum, dtype in DATA_TYPES.items() if enum < 100]
    assert len({dtype.name for dtype in values}) == len(values) == 33
    assert {DATA_TYPES[enum + 100].name for enum in range(1, 34)} == {dtype.name for dtype in values}


def _pod_bundle(tmp_path: Path, values: bytes, *, dtype: int = 1, shape: tuple[int, ...] = (2,)) -> Path:
    prefix = tmp_path / "hand"
    Path(f"{prefix}.data-00000-of-00001").write_bytes(values)
    entry = BundleEntry(
        "w",
        DATA_TYPES.get(dtype, DataType(dtype, "invalid", None)),
        shape,
        0,
        0,
        len(values),
        mask_crc(crc32c.crc32c(values)),
    )
    write_table(Path(f"{prefix}.index"), [(b"", encode_header(1)), (b"w", encode_entry(entry))])
    return prefix


def test_a_hand_made_bundle_reads_and_verifies(tmp_path: Path) -> None:
    prefix = _pod_bundle(tmp_path, b"\x00\x00\x80\x3f\x00\x00\x00\xc0")
    bundle = open_bundle(prefix)
    assert bundle.decode("w") == [1.0, -2.0]
    assert (bundle.entries["w"].role, bundle.entries["w"].object_path) == ("model_variable", "w")
    assert verify_bundle(prefix) == []


def test_bfloat16_decodes_to_its_float(tmp_path: Path) -> None:
    prefix = _pod_bundle(tmp_path, b"\x80\x3f\x40\xc0", dtype=14)
    assert open_bundle(prefix).decode("w") == [1.0, -3.0]


def test_an_unknown_dtype_is_reported(tmp_path: Path) -> None:
    prefix = _pod_bundle(tmp_path, b"\x00\x00", dtype=0)
    assert [(p.key, p.code) for p in verify_bundle(prefix)] == [("w", "bad-dtype")]


def test_an_object_graph_that_does_not_decode(tmp_path: Path) -> None:
    prefix = tmp_path / "hand"
    graph, graph_crc = string_tensor([b"\xff\xff"])
    names, names_crc = string_tensor([b"ab", b"", b"xyz"])
    Path(f"{prefix}.data-00000-of-00001").write_bytes(graph + names)
    string = DATA_TYPES[7]
    entries = [
        BundleEntry("_CHECKPOINTABLE_OBJECT_GRAPH", string, (), 0, 0, len(graph), graph_crc),
        BundleEntry("opt/w/Adam", string, (3,), 0, len(graph), len(names), names_crc),
    ]
    write_table(
        Path(f"{prefix}.index"), [(b"", encode_header(1))] + [(e.key.encode(), encode_entry(e)) for e in entries]
    )
    bundle = open_bundle(prefix)
    assert bundle.object_graph is None
    assert bundle.decode("opt/w/Adam") == [b"ab", b"", b"xyz"]
    assert bundle.entries["opt/w/Adam"].role == "optimizer_slot"
    assert [(p.key, p.code) for p in verify_bundle(prefix)] == [
        ("_CHECKPOINTABLE_OBJECT_GRAPH", "unreadable-object-graph")
    ]


def test_a_table_without_a_header_key(tmp_path: Path) -> None:
    write_table(tmp_path / "x.index", [(b"a", b"")])
    with pytest.raises(CorruptCheckpointError, match=r"the first key is 'a', not the bundle header"):
        open_bundle(tmp_path / "x")


def test_a_header_that_is_not_a_proto(tmp_path: Path) -> None:
    write_table(tmp_path / "x.index", [(b"", b"\xff")])
    with pytest.raises(CorruptCheckpointError, match=r"^.*x\.index: bundle header: "):
        open_bundle(tmp_path / "x")


def test_an_entry_with_an_unknown_rank(tmp_path: Path) -> None:
    entry = varint_field(1, 1) + message_field(2, varint_field(3, 1))
    write_table(tmp_path / "x.index", [(b"", encode_header(1)), (b"w", entry)])
    with pytest.raises(CorruptCheckpointError, match="entry 'w': shape of unknown rank"):
        open_bundle(tmp_path / "x")


@given(st.lists(st.binary(max_size=12), unique=True, max_size=40))
def test_tables_round_trip_prefix_compression(keys: list[bytes]) -> None:
    import tempfile

    items = [(key, key[::-1] * 2) for key in sorted(keys)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "t.index"
        write_table(path, items, restart_interval=3)
        assert list(SSTable.open(path).items()) == items


def test_slice_extents_without_length_cover_the_dimension() -> None:
    tensor_slice = TensorSlice((SliceExtent(2, 3), SliceExtent(0, None)))
    assert tensor_slice.bounds((10, 4)) == [(2, 5), (0, 4)]
    assert tensor_slice.spec((10, 4)) == "2:5,0:4"


def _state_dir(tmp_path: Path, text: str, prefixes: list[str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "checkpoint").write_text(text, encoding="utf-8")
    for prefix in prefixes:
        Path(f"{prefix}.index").parent.mkdir(parents=True, exist_ok=True)
        Path(f"{prefix}.index").write_bytes(b"")
    return tmp_path


def test_state_file_with_relative_paths(tmp_path: Path) -> None:
    text = (
        'model_checkpoint_path: "ckpt-2"\n'
        'all_model_checkpoint_paths: "ckpt-1"\n'
        'all_model_checkpoint_paths: "ckpt-2"\n'
        "all_model_checkpoint_timestamps: 1795969812.1169865\n"
        "all_model_checkpoint_timestamps: 1795969812.130141\n"
        "last_preserved_timestamp: 1795969811.069272\n"
    )
    directory = _state_dir(tmp_path, text, [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")])
    state = read_checkpoint_state(directory)
    assert state.all_model_checkpoint_timestamps == (1795969812.1169865, 1795969812.130141)
    assert state.last_preserved_timestamp == 1795969811.069272
    assert latest_checkpoint(directory) == tmp_path / "ckpt-2"
    assert list_checkpoints(directory) == [tmp_path / "ckpt-1", tmp_path / "ckpt-2"]


def test_state_file_with_absolute_and_escaped_paths(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other dir" / "caf\u00e9" / "model.ckpt-7"
    escaped = str(elsewhere).replace("\u00e9", "\\303\\251")
    directory = _state_dir(tmp_path / "run", f'model_checkpoint_path: "{escaped}"\n', [str(elsewhere)])
    assert read_checkpoint_state(directory).model_checkpoint_path == elsewhere
    assert list_checkpoints(directory) == []
    # Decoded, but never followed out of the directory it was found in.
    with pytest.raises(ReaderError, match=r"points to checkpoint .*other dir/caf\u00e9/model\.ckpt-7, outside .*run; it was not followed"):
        latest_checkpoint(directory)


def test_state_file_naming_a_deleted_checkpoint(tmp_path: Path) -> None:
    directory = _state_dir(tmp_path, 'model_checkpoint_path: "ckpt-9"\n', [])
    with pytest.raises(ReaderError, match=r"checkpoint: names checkpoint .*ckpt-9, but .*ckpt-9\.index does not exist"):
        latest_checkpoint(directory)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_checkpoint_path ckpt\n", r"checkpoint:1: not a `field: value` line"),
        ('surprise: "x"\n', r"checkpoint:1: unknown CheckpointState field 'surprise'"),
        ('all_model_checkpoint_paths: "a"\n', r"checkpoint: no model_checkpoint_path"),
        ("model_checkpoint_path: ckpt\n", r"checkpoint: expected a quoted path"),
    ],
)
def test_malformed_state_files(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "checkpoint").write_text(text)
    with pytest.raises(CorruptCheckpointError, match=message):
        read_checkpoint_state(tmp_path)
