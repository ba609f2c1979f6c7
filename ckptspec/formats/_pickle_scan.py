"""The opcode walk: one bounded pass over a pickle's bytes noting what they name, building no object.

`scan_pickle` reads every global a pickle names (GLOBAL and INST by their text, STACK_GLOBAL by the
strings pushed before it) and every EXT and FRAME opcode, and stops at the first opcode that does not
decode, at a memo index or integer that would make the C unpickler allocate beyond the bytes present,
and at a tuple nested deep enough to crash it. `_pickle_safety` runs it before unpickling.
"""

from __future__ import annotations

import _compat_pickle
import pickletools
from collections import Counter
from dataclasses import field

from .._dataclass import dataclass
from ._pickle_stack import TUPLE_NESTING_LIMIT, walk_stack

__all__ = ["PickleScan", "python3_name", "scan_pickle"]


def python3_name(module: str, name: str) -> tuple[str, str]:
    """Protocol 0-2 pickles spell some globals the Python 2 way (`__builtin__.set`); read them as
    `pickle` itself does with `fix_imports`, so the safety table sees the real target."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


@dataclass
class PickleScan:
    """What one opcode walk over a pickle found, without building any object."""

    globals: Counter[tuple[str, str]] = field(default_factory=Counter)
    extensions: list[tuple[int, int, int]] = field(default_factory=list)
    """`(begin, end, code)` of each EXT opcode, offsets from the pickle's first byte."""
    frames: list[tuple[int, int]] = field(default_factory=list)
    """`(begin, end)` of each FRAME opcode, offsets from the pickle's first byte."""
    unresolved: int = 0
    """STACK_GLOBALs whose two strings the walk could not follow (the unpickler names them)."""
    byte_values: int = 0
    """Opcodes that push bytes, which a call could receive as a pickle to load."""
    tuples: int = 0
    """Opcodes that build a tuple: no tuple nests deeper than there are of them."""
    end: int | None = None
    """Offset just past its STOP opcode; None when the walk stopped before it."""
    problem: str | None = None


_ARGUMENT_SIZES = {op.code.encode("latin-1")[0]: op.arg.n if op.arg is not None else 0 for op in pickletools.opcodes}
"""Opcode byte → its argument: a fixed size (>= 0), or one of pickletools' markers: to the newline
(-1), or a length in the next 1, 4 (signed), 4 or 8 bytes (-2 .. -5)."""
_LENGTH_BYTES = {pickletools.TAKEN_FROM_ARGUMENT1: 1, pickletools.TAKEN_FROM_ARGUMENT4: 4,
                 pickletools.TAKEN_FROM_ARGUMENT4U: 4, pickletools.TAKEN_FROM_ARGUMENT8U: 8}  # fmt: skip
_UP_TO_NEWLINE, _SIGNED_LENGTH = pickletools.UP_TO_NEWLINE, pickletools.TAKEN_FROM_ARGUMENT4
_BYTE_STRINGS = frozenset(b"UT")  # SHORT_BINSTRING, BINSTRING: str under pickle's default ASCII decoding
_TWO_LINES = frozenset(b"ci")  # GLOBAL, INST
_ROLES: dict[int, str] = {
    **dict.fromkeys(b"pr", "put"),  # PUT, LONG_BINPUT
    ord("q"): "binput",  # its one-byte index never runs ahead of the values stored
    0x94: "memoize",  # MEMOIZE: the next index
    **dict.fromkeys(b"gj", "get"),  # GET, LONG_BINGET
    ord("h"): "binget",
    **dict.fromkeys(b"\x8cX\x8dUT", "string"),
    **dict.fromkeys(_TWO_LINES, "global"),
    0x93: "stack_global",
    **dict.fromkeys(b"\x82\x83\x84", "extension"),
    0x2E: "stop",
    **dict.fromkeys(b"\x80\x95", "frame"),  # PROTO and FRAME leave the stack as it is
    **dict.fromkeys(b"BC\x8e\x96", "bytes"),  # BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
    **dict.fromkeys(b"\x8a\x8bIL", "integer"),  # LONG1, LONG4; INT, LONG as text
    **dict.fromkeys(b"t\x85\x86\x87", "tuple"),  # TUPLE, TUPLE1-3: counted, since they nest
}
"""What the walk does at an opcode; any other opcode pushes a value that is neither a string nor bytes."""
_STEPS = tuple((1 + size if (size := _ARGUMENT_SIZES.get(code, -9)) >= 0 else size, _ROLES.get(code)) for code in range(256))
"""Opcode byte → (bytes from it to the next opcode, or its argument's marker as in `_ARGUMENT_SIZES`,
-9 for no opcode; role): one lookup a step."""
_MEMO_SLACK = 1024
"""How far a memo index may run ahead of the values stored so far (writers number them in order)."""
_INTEGER_BYTES = {0x8A: 128, 0x8B: 128, ord("I"): 312, ord("L"): 312}
"""The longest argument of each integer opcode: 1024 bits, as two's complement bytes or as decimal text
with its sign, `L` and newline; no value of a checkpoint needs more (documents are held to the same
bound), and an integer of thousands of digits is one Python will not even print."""


def scan_pickle(data: bytes, start: int = 0) -> PickleScan:
    """Walk the pickle at `data[start:]` opcode by opcode up to its STOP, never building an object.

    Notes every global it names (GLOBAL and INST by their text, STACK_GLOBAL by the strings pushed
    before it, through the memo) and every EXT code. Stops with a `problem` at the first opcode that
    does not decode, at a memo index that runs ahead of the values stored, which would make the C
    unpickler allocate for it, and (checked only when there are enough tuples to nest so) at a tuple
    nested deeper than `TUPLE_NESTING_LIMIT`, whose recursive hash would crash it. One pass, linear in
    the bytes walked; arguments are only decoded where they can name a global.
    """
    scan = PickleScan()
    recent, latest = None, None  # the two values pushed last, where they are strings
    strings: dict[int, str] = {}
    stored, position, size = 0, start, len(data)
    try:
        while True:  # until STOP, a problem, or the IndexError of reading past the last byte
            step, role = _STEPS[data[position]]
            if step > 0:
                end = position + step
                if end > size:
                    scan.problem = f"the opcode at byte {position} needs {end - size} bytes more than the pickle has"
                    return scan
            else:
                span = _argument_span(data, position, step)
                if isinstance(span, str):
                    scan.problem = span
                    return scan
                begin, end = span  # only variable-length arguments are decoded from `begin`
            if role is None:
                recent, latest = latest, None
            elif role == "binput":
                if latest is not None:
                    strings[data[position + 1]] = latest
                stored += 1
            elif role == "binget":
                recent, latest = latest, strings.get(data[position + 1])
            elif role == "memoize":
                if latest is not None:
                    strings[stored] = latest
                stored += 1
            elif role == "put":
                index = _index(data, position + 1, end, data[position])
                if index > stored + _MEMO_SLACK:
                    scan.problem = f"memo index {index} at byte {position} runs ahead of the {stored} values stored"
                    return scan
                stored += 1
                if latest is not None:
                    strings[index] = latest
            elif role == "get":
                recent, latest = latest, strings.get(_index(data, position + 1, end, data[position]))
            elif role == "string":
                recent, latest = latest, _text(data[begin:end], "ascii" if data[position] in _BYTE_STRINGS else "utf-8")
            elif role == "bytes":
                scan.byte_values += 1
                recent, latest = latest, None
            elif role == "integer":
                if end - begin > _INTEGER_BYTES[data[position]]:
                    scan.problem = f"the integer at byte {position} takes {end - begin} bytes, more than the 1024 bits any checkpoint value needs"
                    return scan
                recent, latest = latest, None
            elif role == "global":
                module, _, name = data[begin : end - 1].partition(b"\n")
                scan.globals[python3_name(module.decode("utf-8", "replace"), name.decode("utf-8", "replace"))] += 1
                recent, latest = latest, None
            elif role == "stack_global":
                if recent is not None and latest is not None:
                    scan.globals[python3_name(recent, latest)] += 1
                else:
                    scan.unresolved += 1
                recent, latest = latest, None
            elif role == "extension":
                code = data[position]
                extension = int.from_bytes(data[position + 1 : end], "little", signed=code == 0x84)  # EXT4 is signed
                if extension <= 0:
                    scan.problem = f"EXT code {extension} at byte {position} is not a registrable code"
                    return scan
                scan.extensions.append((position - start, end - start, extension))
                recent, latest = latest, None
            elif data[position] == 0x95:  # FRAME
                scan.frames.append((position - start, end - start))
            elif role == "tuple":
                scan.tuples += 1
                recent, latest = latest, None
            elif role == "stop":
                if scan.tuples > TUPLE_NESTING_LIMIT:
                    deepest = walk_stack(data, start, tuple_limit=TUPLE_NESTING_LIMIT)
                    if deepest.deepest_tuple > TUPLE_NESTING_LIMIT:
                        scan.problem = (f"the tuple built at byte {deepest.end} nests more than {TUPLE_NESTING_LIMIT} levels deep;"
                                        " the C unpickler hashes a dict key or set item recursively, and one nested so deep crashes the process reading it")
                        return scan
                scan.end = end
                return scan
            position = end
    except IndexError:
        scan.problem = "ends before its STOP opcode"
        return scan


def _argument_span(data: bytes, position: int, size: int) -> tuple[int, int] | str:
    """Where the variable-length argument of the opcode at `position` lies, `(begin, end)` with
    `end` the next opcode, or what is wrong with it."""
    begin = position + 1
    width = _LENGTH_BYTES.get(size)
    if width is not None:
        length = int.from_bytes(data[begin : begin + width], "little", signed=size == _SIGNED_LENGTH)
        if length < 0:
            return f"the opcode at byte {position} has a negative length"
        begin += width
        end = begin + length
    elif size == _UP_TO_NEWLINE:
        end = data.find(b"\n", begin) + 1
        if end and data[position] in _TWO_LINES:
            end = data.find(b"\n", end) + 1
        if not end:
            return f"the opcode at byte {position} has no end of line"
    else:
        return f"byte {data[position]:#04x} at {position} is not a pickle opcode"
    if end > len(data):
        return f"the opcode at byte {position} needs {end - len(data)} bytes more than the pickle has"
    return begin, end


def _index(data: bytes, begin: int, end: int, code: int) -> int:
    if code in b"pg":  # the text forms: decimal digits and a newline
        digits = data[begin : end - 1]
        return int(digits) if digits.isdigit() and len(digits) < 20 else -1
    return int.from_bytes(data[begin:end], "little")


def _text(raw: bytes, encoding: str) -> str | None:
    try:
        return raw.decode(encoding, "surrogatepass" if encoding == "utf-8" else "strict")
    except UnicodeDecodeError:
        return None
