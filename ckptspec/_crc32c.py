"""CRC32C: the `crc32c` package's compiled function, and the CRC32C of joined bytes from their parts'.

`crc32c` is loaded from the package's compiled module without running the package's `__init__`,
which imports `importlib.metadata` (and with it email, zipfile, csv and more) and `argparse` to
look up its own version and offer a command line: about 25 ms of the start-up of every command
that reads a checkpoint, for a function that loads in well under one.

`crc32c_combine` is zlib's `crc32_combine` for the Castagnoli polynomial: ranks checksum their own
chunks of a tensor, threads their own parts of a file, and the whole's CRC32C is put together
without reading any byte twice.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

__all__ = ["crc32c", "crc32c_combine"]

_COMPILED = "crc32c._crc32c"


def _compiled() -> ModuleType:
    """The package's compiled module, loaded once; the package itself where its layout differs."""
    if _COMPILED in sys.modules:
        return sys.modules[_COMPILED]
    package = importlib.util.find_spec("crc32c")
    locations = package.submodule_search_locations if package is not None else None
    spec = importlib.machinery.PathFinder.find_spec(_COMPILED, locations) if locations else None
    if spec is None or spec.loader is None:
        import crc32c as package_module

        return package_module
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[_COMPILED] = module  # the package's own import, if anything runs it, finds it loaded
    return module


crc32c: Callable[..., int] = _compiled().crc32c
"""`crc32c(data, value=0)`: the CRC32C of `data` continued from `value` (the interpreter lock is
released for buffers of 32 KiB or more)."""

_POLYNOMIAL = 0x82F63B78  # Castagnoli, reflected
_ONE = 1 << 31  # the polynomial 1, reflected


def _multiply(first: int, second: int) -> int:
    """`first * second` modulo the polynomial, both reflected."""
    product, bit = 0, _ONE
    while first:
        if first & bit:
            product ^= second
            first ^= bit
        bit >>= 1
        second = (second >> 1) ^ _POLYNOMIAL if second & 1 else second >> 1
    return product


_X_SQUARED_N_TIMES = [_ONE >> 1]  # x^(2^k) for k = 0, 1, ...; 64 powers reach past any file length
for _ in range(63):
    _X_SQUARED_N_TIMES.append(_multiply(_X_SQUARED_N_TIMES[-1], _X_SQUARED_N_TIMES[-1]))


@functools.lru_cache(maxsize=4096)
def _x_to_8_times(length: int) -> int:
    """x^(8 * length): the factor that advances a CRC over `length` zero bytes. Kept for lengths
    seen before: a model's tensors come in a few sizes, and so do the records between them."""
    power, exponent = _ONE, 3
    while length:
        if length & 1:
            power = _multiply(_X_SQUARED_N_TIMES[exponent], power)
        length >>= 1
        exponent += 1
    return power


def crc32c_combine(first: int, second: int, second_length: int) -> int:
    """`crc32c(a + b)` from `crc32c(a)`, `crc32c(b)` and `len(b)`."""
    if second_length <= 0:
        return first
    return _multiply(_x_to_8_times(second_length), first) ^ second
