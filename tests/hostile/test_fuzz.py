"""Coverage of the pickle entry point by generated inputs: every input reads, or is refused with a
`CkptspecError`; nothing else escapes, nothing runs, and a dangerous global is never judged allowed.

Inputs are opcode sequences assembled from pieces that real pickles and real attacks use (globals on
and off the allow-list, memo traffic, EXT codes, frames, persistent ids, nested pickle bytes) plus
raw byte mutations of them. CI runs 150 examples; `CKPTSPEC_FUZZ_EXAMPLES=20000` runs the longer
campaign that docs/security.md records.
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError
from ckptspec.formats._pickle_safety import classify_pickle_stream
from ckptspec._pickle_policy import ALLOW_LIST
from ckptspec.formats.torchzip import unpickle_untrusted

_EXAMPLES = int(os.environ.get("CKPTSPEC_FUZZ_EXAMPLES", "150"))
_MARKER = Path(tempfile.gettempdir()) / f"ckptspec-fuzz-ran-{os.getpid()}"
_GLOBALS = [*sorted(ALLOW_LIST)[:12], ("os", "system"), ("builtins", "eval"), ("pickle", "loads"),
            ("torch._utils", "_rebuild_tensor_v2.__globals__"), ("collections", "OrderedDict.get"),
            ("copyreg", "_reconstructor"), ("", ""), ("a" * 300, "b")]  # fmt: skip


def _text(value: str) -> bytes:
    encoded = value.encode()
    return b"\x8c" + bytes([len(encoded)]) + encoded if len(encoded) < 256 else b"X" + struct.pack("<I", len(encoded)) + encoded


_NESTED = b"\x80\x02cos\nsystem\n" + _text(f"touch {_MARKER}") + b"\x85R."
"""A pickle that would run a command, handed to whatever global precedes it as bytes."""

_PIECES = st.one_of(
    st.sampled_from(_GLOBALS).map(lambda g: _text(g[0]) + _text(g[1]) + b"\x93"),
    st.sampled_from(_GLOBALS).map(lambda g: f"c{g[0]}\n{g[1]}\n".encode()),
    st.sampled_from([b"(", b")", b"]", b"}", b"t", b"R", b"b", b"s", b"u", b"a", b"e", b"\x85", b"\x86", b"\x87",
                     b"\x81", b"\x92", b"\x94", b"0", b"1", b"2", b"N", b"\x88", b"\x89", b"Q", b"o", b"\x95" + bytes(8)]),
    st.integers(0, 2**31 - 1).map(lambda n: b"J" + struct.pack("<i", n)),
    st.integers(0, 300).map(lambda n: b"q" + bytes([n % 256]) if n < 256 else b"r" + struct.pack("<I", n)),
    st.integers(0, 300).map(lambda n: b"h" + bytes([n % 256]) if n < 256 else b"j" + struct.pack("<I", n)),
    st.sampled_from([b"\x82\x01", b"\x83\x34\x12", b"\x84\x56\x34\x12\x00"]),
    st.binary(max_size=40).map(lambda data: b"C" + bytes([len(data)]) + data),
    st.just(b"B" + struct.pack("<I", len(_NESTED)) + _NESTED),
    st.text(max_size=20).map(_text),
)


@st.composite
def _pickles(draw: st.DrawFn) -> bytes:
    body = b"".join(draw(st.lists(_PIECES, max_size=40)))
    data = bytes([0x80, draw(st.integers(0, 6))]) + body + b"."
    if draw(st.booleans()):
        mutated = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            mutated[draw(st.integers(0, len(mutated) - 1))] = draw(st.integers(0, 255))
        data = bytes(mutated)
    return data + draw(st.sampled_from([b"", data, pickle.dumps({"more": [1, 2]}), b"\x00" * 8]))


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pickles())
def test_the_pickle_entry_point_reads_or_refuses_and_never_allows_a_danger(data: bytes) -> None:
    try:
        _, globals_named = unpickle_untrusted(data, "fuzz.pkl")
    except CkptspecError as exc:
        globals_named = getattr(exc, "globals", [])
    assert all(ref.safety == "dangerous" for ref in globals_named if (ref.module, ref.name) not in ALLOW_LIST)
    streamed, end = classify_pickle_stream(data)
    assert 0 <= end <= len(data)
    assert all(ref.safety == "dangerous" for ref in streamed if (ref.module, ref.name) not in ALLOW_LIST)
    assert not _MARKER.exists()


FOUND = [
    b"\x80\x00\x84V4\x12\x80.",  # EXT4 whose code is negative once read as the signed int CPython reads
    b"\x80\x00\x8c\x07\x80codecs\x8c\x06encode\x93\x82\x01.",  # a string that is not UTF-8, then an EXT opcode
]


@pytest.mark.parametrize("data", FOUND, ids=["ext4-signed", "non-utf8-before-ext"])
def test_inputs_the_fuzzer_found_are_refused_cleanly(data: bytes) -> None:
    with pytest.raises(CkptspecError):
        unpickle_untrusted(data, "found.pkl")
    assert 0 <= classify_pickle_stream(data)[1] <= len(data)
