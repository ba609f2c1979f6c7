"""CRC32C of two byte strings joined, from their CRC32Cs and the second one's length (zlib's
`crc32_combine`, for the Castagnoli polynomial): ranks checksum their own chunks of a tensor, and
the tensor's CRC32C is put together without reading any byte twice."""

from __future__ import annotations

import functools

__all__ = ["crc32c_combine"]

_POLYNOMIAL = 0x82F63B78  # Castagnoli, reflected
_Matrix = tuple[int, ...]


def _times(matrix: _Matrix, vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _compose(first: _Matrix, then: _Matrix) -> _Matrix:
    return tuple(_times(then, column) for column in first)


_ONE_ZERO_BIT: _Matrix = (_POLYNOMIAL, *(1 << n for n in range(31)))


@functools.cache
def _zeros_operators() -> tuple[_Matrix, ...]:
    """The operators that advance a CRC over 2**k zero bytes, for k = 0..63, built once: a combine
    then costs one matrix-vector product per set bit of the length, whatever the length."""
    power = _ONE_ZERO_BIT
    for _ in range(3):  # 8 zero bits: one zero byte
        power = _compose(power, power)
    operators = [power]
    for _ in range(63):
        operators.append(_compose(operators[-1], operators[-1]))
    return tuple(operators)


def crc32c_combine(first: int, second: int, second_length: int) -> int:
    """`crc32c(a + b)` from `crc32c(a)`, `crc32c(b)` and `len(b)`."""
    if second_length <= 0:
        return first
    for operator in _zeros_operators():
        if not second_length:
            break
        if second_length & 1:
            first = _times(operator, first)
        second_length >>= 1
    return first ^ second
