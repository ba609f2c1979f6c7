"""CRC32C of two byte strings joined, from their CRC32Cs and the second one's length (zlib's
`crc32_combine`, for the Castagnoli polynomial): ranks checksum their own chunks of a tensor, threads
their own parts of a file, and the whole's CRC32C is put together without reading any byte twice."""

from __future__ import annotations

__all__ = ["crc32c_combine"]

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


def _x_to_8_times(length: int) -> int:
    """x^(8 * length): the factor that advances a CRC over `length` zero bytes."""
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
