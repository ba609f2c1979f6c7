"""Inert stand-ins for the few non-torch classes checkpoints legitimately pickle.

Each is what `find_class` hands the unpickler for one allowed global; none of them imports or calls
anything. numpy objects (as found in RNG state and metric scalars) keep their raw bytes and dtype string.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import field
from typing import Any

from .._dataclass import dataclass

__all__ = [
    "GENERIC_BUILDERS",
    "charge_copy",
    "copy_budget",
    "NumpyArray",
    "NumpyDType",
    "NumpyScalar",
    "PickledDict",
    "PickledNamespace",
]

_COPY_BUDGET: ContextVar[list[int] | None] = ContextVar("ckptspec_copy_budget", default=None)
_COPIES_PER_BYTE = 4
_COPY_ALLOWANCE = 1 << 16


@contextlib.contextmanager
def copy_budget(pickle_size: int) -> Iterator[None]:
    """Bound what builders may copy while one pickle of `pickle_size` bytes is read.

    The memo lets a pickle hand one large value to a builder many times for a few bytes each; a
    builder that copies its argument (`set`, `bytearray`, `_codecs.encode`, a layout tuple) would turn
    that into memory and time without end. Copies are charged against a few times the pickle's size.
    """
    token = _COPY_BUDGET.set([_COPIES_PER_BYTE * pickle_size + _COPY_ALLOWANCE])
    try:
        yield
    finally:
        _COPY_BUDGET.reset(token)


def charge_copy(count: int) -> None:
    """Charge `count` copied values to the current pickle's budget (no budget outside `copy_budget`)."""
    remaining = _COPY_BUDGET.get()
    if remaining is None:
        return
    remaining[0] -= count
    if remaining[0] < 0:
        raise ValueError("the pickle has its builders copy more values than a few times its own size (memo reuse)")


class PickledDict(dict):  # type: ignore[type-arg]
    """`collections.OrderedDict` / `Counter` as a plain dict; BUILD state (`_metadata` of a module
    state dict) is kept in `attributes` instead of being set on the object."""

    attributes: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledDict:
        # NEWOBJ calls only __new__, so the attribute store must exist without __init__.
        instance = super().__new__(cls)
        instance.attributes = {}
        return instance

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            charge_copy(len(state))
            self.attributes.update(state)


class PickledNamespace:
    """`argparse.Namespace` (a common hyper-parameter container): its attributes as a dict."""

    attributes: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledNamespace:
        instance = super().__new__(cls)
        instance.attributes = {}
        return instance

    def __init__(self, **attributes: Any) -> None:
        charge_copy(len(attributes))
        self.attributes.update(attributes)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            charge_copy(len(state))
            self.attributes.update(state)

    def __repr__(self) -> str:
        return f"Namespace({self.attributes!r})"


class NumpyDType:
    """`numpy.dtype(code, align, copy)`; BUILD state sets the byte order."""

    def __init__(self, code: Any = "", align: Any = False, copy: Any = True) -> None:
        self.code = str(code).lstrip("<>|=")
        self.byteorder = "="

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and isinstance(state[1], str):
            self.byteorder = state[1]

    @property
    def descr(self) -> str:
        """The dtype as numpy's `dtype.str` spells it, e.g. `<u4` (native order is read as little)."""
        order = self.byteorder if self.byteorder in {"<", ">", "|"} else "<"
        return order + self.code

    def __repr__(self) -> str:
        return f"NumpyDType({self.descr!r})"


@dataclass
class NumpyArray:
    """A small numpy array pickled inline (RNG state): dtype, shape and raw bytes, never a view."""

    shape: tuple[int, ...] = ()
    dtype: NumpyDType | None = None
    fortran_order: bool = False
    data: bytes = field(default=b"", repr=False)
    objects: list[Any] = field(default_factory=list, repr=False)
    """The items of an array of Python objects, which numpy pickles as a list in place of raw bytes."""

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise ValueError("numpy array state is not (version, shape, dtype, fortran, data)")
        _, shape, dtype, fortran_order, data = state
        self.shape = tuple(shape)
        self.dtype = dtype if isinstance(dtype, NumpyDType) else None
        self.fortran_order = bool(fortran_order)
        if isinstance(data, list):
            self.objects = data
            return
        charge_copy(len(data) if isinstance(data, (str, bytearray)) else 0)
        self.data = data.encode("latin1") if isinstance(data, str) else bytes(data)


_SCALAR_FORMATS = {"f8": "d", "f4": "f", "f2": "e", "i8": "q", "i4": "i", "i2": "h", "i1": "b",
                   "u8": "Q", "u4": "I", "u2": "H", "u1": "B", "b1": "?"}


@dataclass(frozen=True, slots=True)
class NumpyScalar:
    """A numpy scalar (`np.float64(0.5)` in metrics): its dtype, raw bytes and decoded value."""

    dtype: NumpyDType | None
    data: bytes
    value: Any


def _reconstruct_ndarray(cls: Any, shape: Any, dtype_code: Any) -> NumpyArray:
    return NumpyArray()


def _array_from_buffer(buffer: Any, dtype: Any, shape: Any, order: Any = "C") -> NumpyArray:
    """`numpy._core.numeric._frombuffer`, how protocol 5 pickles arrays."""
    if not isinstance(buffer, (bytes, bytearray)) or not isinstance(shape, tuple):
        raise TypeError("numpy _frombuffer with a non-bytes buffer or non-tuple shape")
    charge_copy(len(buffer) if isinstance(buffer, bytearray) else 0)
    return NumpyArray(tuple(shape), dtype if isinstance(dtype, NumpyDType) else None, order == "F", bytes(buffer))


def _build_numpy_scalar(dtype: Any, data: Any = b"") -> NumpyScalar:
    raw = data.encode("latin1") if isinstance(data, str) else bytes(data) if isinstance(data, bytes) else b""
    code = dtype.code if isinstance(dtype, NumpyDType) else ""
    value_format = _SCALAR_FORMATS.get(code)
    value: Any = None
    if value_format is not None and struct.calcsize(value_format) == len(raw):
        order = ">" if isinstance(dtype, NumpyDType) and dtype.byteorder == ">" else "<"
        (value,) = struct.unpack(order + value_format, raw)
    return NumpyScalar(dtype if isinstance(dtype, NumpyDType) else None, raw, value)


def _encode_bytes(text: Any, encoding: Any = "utf-8") -> bytes:
    """`_codecs.encode`, as protocol 2 uses it for `bytes`: only text in a plain text encoding."""
    if not isinstance(text, str) or encoding not in {"latin1", "latin-1", "utf-8", "utf8", "ascii"}:
        raise ValueError("_codecs.encode is only accepted for text in latin1/utf-8/ascii")
    charge_copy(len(text))
    return text.encode(encoding)


def _literal_collection(kind: type) -> Any:
    def build(values: Iterable[Any] = ()) -> Any:
        if not isinstance(values, (list, tuple, set, frozenset, bytes, str)):
            raise TypeError(f"{kind.__name__}() of {type(values).__name__} refused")
        charge_copy(len(values))
        return kind(values)

    build.__name__ = kind.__name__
    return build


def _build_bytearray(data: Any = b"", *encoding: Any) -> bytearray:
    if isinstance(data, (str, bytes, list)):
        charge_copy(len(data))
    if isinstance(data, str):
        return bytearray(data.encode("latin1"))
    if isinstance(data, (bytes, list)):
        return bytearray(data)
    raise TypeError(f"bytearray() of {type(data).__name__} refused")


def _build_complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    if not all(isinstance(part, (int, float)) for part in (real, imag)):
        raise TypeError("complex() of non-numbers refused")
    return complex(real, imag)


class _NumpyClassMarker:
    """`numpy.ndarray` as named inside `_reconstruct`: a marker, never instantiated."""


GENERIC_BUILDERS: dict[tuple[str, str], object] = {
    ("collections", "OrderedDict"): PickledDict,
    ("collections", "Counter"): PickledDict,
    ("argparse", "Namespace"): PickledNamespace,
    ("_codecs", "encode"): _encode_bytes,
    ("builtins", "set"): _literal_collection(set),
    ("builtins", "frozenset"): _literal_collection(frozenset),
    ("builtins", "bytearray"): _build_bytearray,
    ("builtins", "complex"): _build_complex,
    ("numpy", "dtype"): NumpyDType,
    ("numpy", "ndarray"): _NumpyClassMarker,
    **{
        (module, "_reconstruct"): _reconstruct_ndarray
        for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    },
    **{(module, "_frombuffer"): _array_from_buffer for module in ("numpy.core.numeric", "numpy._core.numeric")},
    **{(module, "scalar"): _build_numpy_scalar for module in ("numpy.core.multiarray", "numpy._core.multiarray")},
}
