"""Whether a sharded tensor's chunks tile it: each inside the tensor, none overlapping, no gap.

Shared by the readers whose metadata lists a tensor's chunks by offsets and sizes (DCP, and
Hugging Face's distributed storage).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from ._dcp_metadata import Chunk, TensorItem

__all__ = ["tiling_problems"]

_PROBLEMS_SHOWN = 3


def tiling_problems(tensor: TensorItem) -> list[str]:
    """Why the chunks do not cover the tensor exactly once, if they do not.

    Every chunk must lie inside the tensor; no two may overlap (a sweep along one dimension compares
    a chunk only with those whose range along it is still open); and, overlaps
    excluded, the chunks' element counts must add up to the tensor's, which leaves no gap. Nothing
    is allocated by the tensor's size.
    """
    # The first few problems only: thousands of chunks piled on one place would otherwise be
    # millions of overlapping pairs, each a message.
    problems = list(itertools.islice(itertools.chain(_outside(tensor), _overlaps(tensor)), _PROBLEMS_SHOWN))
    if not problems:
        covered = sum(chunk.numel for chunk in tensor.chunks)
        total = math.prod(tensor.shape)
        if covered != total:
            problems.append(f"its chunks cover {covered} of its {total} elements: a gap (a shard was not saved)")
    return problems


_COMPARISONS = 1_000_000
_COMPARISONS_PER_CHUNK = 64
"""How many chunk pairs the overlap sweep compares at most. Row, column and grid sharding keep a
chunk's open neighbours to one row of the grid (a 512 x 8 grid: 8 for each chunk); chunks stacked
across each other make every pair open at once, which would cost the square of their count."""


def _outside(tensor: TensorItem) -> Iterator[str]:
    for chunk in tensor.chunks:
        if any(o + s > d for o, s, d in zip(chunk.offsets, chunk.sizes, tensor.shape)):
            yield f"chunk at {list(chunk.offsets)} of size {list(chunk.sizes)} lies outside shape {list(tensor.shape)}"


def _overlaps(tensor: TensorItem) -> Iterator[str]:
    if not tensor.shape:
        if len(tensor.chunks) > 1:
            yield f"{len(tensor.chunks)} chunks hold the same scalar"
        return
    nonempty = [c for c in tensor.chunks if c.numel]
    # Sweep along the dimension the chunks split most: the open set then stays small for row,
    # column and grid sharding alike.
    axis = max(range(len(tensor.shape)), key=lambda d: len({c.offsets[d] for c in nonempty}))
    nonempty.sort(key=lambda c: c.offsets[axis])
    budget = _COMPARISONS + _COMPARISONS_PER_CHUNK * len(nonempty)
    active: list[Chunk] = []
    for chunk in nonempty:
        active = [other for other in active if other.offsets[axis] + other.sizes[axis] > chunk.offsets[axis]]
        budget -= len(active)
        if budget < 0:
            yield (
                f"its {len(nonempty)} chunks lie across each other along every dimension (a layout no DCP writer makes): "
                "they were not all compared, so it is not shown that none overlap"
            )
            return
        for other in active:
            if all(o1 < o2 + s2 and o2 < o1 + s1 for o1, s1, o2, s2 in zip(chunk.offsets, chunk.sizes, other.offsets, other.sizes)):
                yield f"chunks at {list(other.offsets)} and {list(chunk.offsets)} overlap"
        active.append(chunk)
