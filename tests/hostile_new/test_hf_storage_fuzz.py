"""Shard files of DCP's Hugging Face layout with generated sharding records and damaged bytes:
each is read or reported as a problem of its file, never an exception of another kind."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec._exceptions import CkptspecError
from ckptspec.formats.hf_storage import open_hf_storage

from ._safetensors import shard_name, write_shard

_EXAMPLES = int(os.environ.get("CKPTSPEC_FUZZ_EXAMPLES", "60"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["w", "v", "saved_offsets", "x"]), children, max_size=3),
    max_leaves=12,
)
offsets = st.lists(st.integers(-3, 2**66), min_size=0, max_size=3)
records = st.one_of(
    st.dictionaries(st.sampled_from(["w", "v"]), st.fixed_dictionaries({"saved_offsets": offsets}), max_size=2).map(json.dumps),
    json_values.map(lambda value: json.dumps(value, allow_nan=True)),
    st.text(max_size=40),
)


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=st.lists(st.tuples(st.integers(0, 3), records, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3)), min_size=1, max_size=4))
def test_generated_shards_are_read_or_reported(tmp_path_factory: pytest.TempPathFactory, shards: list[tuple[int, str, list[tuple[int, int]]]]) -> None:
    directory = tmp_path_factory.mktemp("hf")
    for rank, (elements, record, damage) in enumerate(shards, start=1):
        path = write_shard(directory / shard_name(rank), {"w": elements, "v": 1}, {"DCP_VERSION": "1.0", "DCP_SHARDING_INFO": record})
        payload = bytearray(path.read_bytes())
        for where, value in damage:
            payload[where % len(payload)] = value
        path.write_bytes(payload)

    opened = open_hf_storage(directory)
    try:
        for tensor in opened.tensors:
            try:
                opened.tensor_crc32c(tensor)
            except CkptspecError as exc:
                assert str(exc).startswith(str(directory))
    finally:
        opened.close()
    assert all(problem.message and problem.file.parent == directory for problem in opened.problems)
