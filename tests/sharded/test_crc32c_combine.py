"""The CRC32C of joined chunks, put together from the chunks' own CRC32Cs."""

from __future__ import annotations

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from ckptspec._crc32c import crc32c_combine


@given(st.lists(st.binary(max_size=300), max_size=6))
def test_combining_chunk_crcs_is_the_crc_of_the_joined_bytes(chunks: list[bytes]) -> None:
    value = 0
    for chunk in chunks:
        value = crc32c_combine(value, crc32c.crc32c(chunk), len(chunk))
    assert value == crc32c.crc32c(b"".join(chunks))


def test_long_second_part() -> None:
    first, second = b"sharded", bytes(range(256)) * 4097
    assert crc32c_combine(crc32c.crc32c(first), crc32c.crc32c(second), len(second)) == crc32c.crc32c(first + second)
