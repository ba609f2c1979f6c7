"""What every reader of a checkpoint file of tensors gives, stated once: its tensors by pointer,
any value of its tree by pointer, the damage its stored checksums show, and its files closed when
the reader is (a `with` block closes it)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator
from typing import Any, TypeVar

from ._tensors import RecordProblem, TensorRef

__all__ = ["TensorReader"]

_Reader = TypeVar("_Reader", bound="TensorReader")


class TensorReader(ABC):
    """A checkpoint read without running its code; views are built on these methods alone."""

    def __enter__(self: _Reader) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Release the files (and mappings) the reader holds."""

    @abstractmethod
    def tensors(self) -> Iterator[tuple[str, TensorRef]]:
        """Every tensor of the tree, with its JSON pointer, in the tree's order."""

    @abstractmethod
    def resolve(self, pointer: str) -> Any:
        """The value at `pointer` in the tree (a `TensorRef` for a tensor)."""

    @abstractmethod
    def verify(self, trusted: Collection[str] = ()) -> list[RecordProblem]:
        """The records whose bytes do not match the checksums the format stores; those holding
        only `trusted` pointers (checked by the caller against a manifest) are not read."""
