"""Read a NumPy `.npy` header as `numpy.load` does, without NumPy: where the array's bytes start and
whether its dtype holds Python objects, which NumPy stores as a pickle right after the header.

A dtype is judged free of objects only when every type in its description is spelled as one of
NumPy's plain types (`'<f8'`, `'|b1'`, `'<U5'`, `'float32'`); any other spelling (`'O'`, `'|O8'`,
`'object'`, a name NumPy may learn tomorrow) counts as one that may hold objects, and the bytes
after the header are judged as the pickle `numpy.load(allow_pickle=True)` would run.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .._dataclass import dataclass

__all__ = ["NPY_HEADER_LIMIT", "NPY_MAGIC", "NpyHeader", "NpyHeaderError", "may_hold_objects", "read_npy_header"]

NPY_MAGIC = b"\x93NUMPY"
NPY_HEADER_LIMIT = 1 << 20
"""Headers longer than this are refused. NumPy caps them at 10 000 characters unless the caller
allows pickles, when it reads any length: no array it writes needs more than a few KiB."""

_LENGTH_FIELDS = {1: (2, "latin1"), 2: (4, "latin1"), 3: (4, "utf8")}
"""Format major version → bytes of the header length field, and the header's text encoding."""
_PLAIN_TYPE = re.compile(
    r"[<>|=]?(?:[?bBhHiIlLqQpPefdgFDG]|[biufc][1-9][0-9]*|b1|[SUVa][0-9]*"
    r"|[mM]8(?:\[[0-9]*(?:Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as|generic)\])?)"
)
"""A type string of a plain NumPy type (`dtype.str`, as `numpy.save` writes it): no object code."""
_PLAIN_NAMES = frozenset(
    "bool bool_ int float complex str bytes str_ bytes_ void byte ubyte short ushort intc uintc intp uintp"
    " long ulong longlong ulonglong half single double longdouble csingle cdouble clongdouble"
    " int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 float96 float128"
    " complex64 complex128 complex192 complex256 datetime64 timedelta64".split()
)
_FIELD_KEYS = frozenset({"names", "formats", "offsets", "titles", "itemsize", "aligned"})
_PYTHON2_LONG = re.compile(r"(?<=[0-9])L\b")


class NpyHeaderError(ValueError):
    """A `.npy` header that `numpy.load` would refuse, or one past `NPY_HEADER_LIMIT`."""


@dataclass(frozen=True)
class NpyHeader:
    descr: Any
    data_offset: int
    """Where the array's bytes (or its pickle) begin."""
    may_hold_objects: bool


def read_npy_header(data: bytes) -> NpyHeader:
    """The header of the `.npy` array whose bytes begin `data` (the whole array, or at least its
    header). Raises `NpyHeaderError` saying what is wrong with a header NumPy would not read."""
    if not data.startswith(NPY_MAGIC) or len(data) < 10:
        raise NpyHeaderError("no .npy signature")
    major = data[6]
    if major not in _LENGTH_FIELDS:
        raise NpyHeaderError(f"unknown .npy format version {major}.{data[7]}")
    width, encoding = _LENGTH_FIELDS[major]
    length = int.from_bytes(data[8 : 8 + width], "little")
    start = 8 + width
    if length > NPY_HEADER_LIMIT:
        raise NpyHeaderError(f"its header claims {length} bytes, more than the {NPY_HEADER_LIMIT} ckptspec reads")
    if start + length > len(data):
        raise NpyHeaderError(f"its header claims {length} bytes, but the array ends {len(data) - start} bytes after its start")
    header = _header_dict(data[start : start + length], encoding, major)
    return NpyHeader(header["descr"], start + length, may_hold_objects(header["descr"]))


def _header_dict(raw: bytes, encoding: str, major: int) -> dict[str, Any]:
    try:
        text = raw.decode(encoding)
        try:
            header = ast.literal_eval(text)
        except SyntaxError:
            if major > 2:
                raise
            header = ast.literal_eval(_PYTHON2_LONG.sub("", text))  # NumPy reads Python 2's `3L` too
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
        raise NpyHeaderError(f"its header is no Python literal ({type(exc).__name__})") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise NpyHeaderError("its header is not the dictionary of descr, fortran_order and shape NumPy writes")
    return header


def may_hold_objects(descr: Any) -> bool:
    """Whether a dtype description may hold Python objects: anything but plain types, at any depth of
    a structured dtype (lists of fields, sub-array tuples, the dict form), counts as one that may."""
    pending = [descr]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if not (_PLAIN_TYPE.fullmatch(value) or value in _PLAIN_NAMES):
                return True
        elif isinstance(value, tuple) and len(value) == 2 and not isinstance(value[1], (str, list, tuple, dict)):
            pending.append(value[0])  # (type, shape): a sub-array; a bare number is a shape or an itemsize
        elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], tuple) and _is_shape(value[1]):
            pending.append(value[0])
        elif isinstance(value, list):
            for field in value:
                if not isinstance(field, (tuple, list)) or len(field) not in (2, 3):
                    return True
                pending.append(field[1])  # (name, type) or (name, type, shape): names are never types
        elif isinstance(value, dict) and set(value) <= _FIELD_KEYS and isinstance(value.get("formats"), list):
            pending.extend(value["formats"])
        else:
            return True  # a form NumPy may read some way ckptspec does not follow: judged as objects
    return False


def _is_shape(value: tuple[Any, ...]) -> bool:
    return all(type(item) is int for item in value)
