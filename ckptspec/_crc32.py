"""CRC-32, the zip format's checksum: ISA-L's when the `fast` extra is installed, zlib's otherwise.

Every stored tensor of a torch, TorchScript or Keras archive is checked against the CRC-32 its zip
directory records; without a manifest that is the only check of the bytes, and the largest part of
judging a small checkpoint. zlib computes it at 2–5 GB/s; ISA-L's (`isal`, carry-less multiplication
on x86-64 and Arm) at 14–80 GB/s, with the same value for every input.
"""

from __future__ import annotations

__all__ = ["crc32"]

try:
    from isal.isal_zlib import crc32
except ImportError:
    from zlib import crc32
