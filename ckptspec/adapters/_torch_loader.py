"""The batches a plain-torch loop draws from the `DataLoader` it hands to `save` and `restore`.

The loop keeps its loader and its `for batch in loader`: ckptspec watches the loader's iterators
(each one it makes from then on, and the one already drawing when the loader is first handed over,
which only the garbage collector's references lead to) by wrapping their per-batch methods on the
instances. Batches are digested only while a save's record or a resume's check waits for them.
"""

from __future__ import annotations

import collections
import gc
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter, _SingleProcessDataLoaderIter

from .._exceptions import AdapterError
from ._next_batches import BatchDrawn, DataOrderCheck, LoaderShape, Recorder
from ._torch_tensors import tensor_bytes

__all__ = ["LoaderWatch", "batch_crc32c", "watch_loader"]


class LoaderWatch:
    """What ckptspec waits for from one loader's batches: records of saves, a resume's check, and a
    check to run once before the resumed run draws anything."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.check: DataOrderCheck | None = None
        self.before_drawing: Callable[[], None] | None = None
        self.live: weakref.ref[_BaseDataLoaderIter] | None = None

    def shape(self, loader: DataLoader) -> LoaderShape:
        live = self.live() if self.live is not None else None
        return LoaderShape(samples=_length(loader.dataset), drawn_in_epoch=live._num_yielded if live is not None else 0)

    def starting(self) -> None:
        """The loader is about to draw: run the resume's one-shot check first."""
        check, self.before_drawing = self.before_drawing, None
        if check is not None:
            check()

    def drawn(self, batch: Any, indices: Any) -> None:
        if not self.recorder.waiting and (self.check is None or self.check.status != "pending"):
            return
        drawn = BatchDrawn(batch_crc32c(batch), _sample_indices(indices))
        self.recorder.drawn(drawn)
        if self.check is not None:
            self.check.check(drawn)


_WATCHES: weakref.WeakKeyDictionary[DataLoader, LoaderWatch] = weakref.WeakKeyDictionary()


def watch_loader(loader: Any, by: str) -> LoaderWatch:
    """The watch on `loader`, begun at its first handing over (with its iterator already drawing, if any)."""
    if not isinstance(loader, DataLoader):
        raise AdapterError(f"{by}: loader= takes the torch.utils.data.DataLoader the loop draws its batches from, not {type(loader).__name__}")
    watch = _WATCHES.get(loader)
    if watch is None:
        watch = _WATCHES[loader] = LoaderWatch()
        make_iterator = loader._get_iterator
        loader._get_iterator = lambda: _observed(watch, _started(watch, make_iterator))
        for iterator in _drawing_from(loader):
            _observed(watch, iterator)
    return watch


def _started(watch: LoaderWatch, make_iterator: Callable[[], _BaseDataLoaderIter]) -> _BaseDataLoaderIter:
    watch.starting()  # before the iterator draws its base seed from the generators
    return make_iterator()


def _drawing_from(loader: DataLoader) -> list[_BaseDataLoaderIter]:
    persistent = getattr(loader, "_iterator", None)
    if persistent is not None:
        return [persistent]
    sampler = loader._index_sampler
    found = []
    for item in gc.get_referrers(sampler):
        if isinstance(item, dict) and item.get("_index_sampler") is sampler:  # an instance whose attributes outgrew their inline slots
            found += [owner for owner in gc.get_referrers(item) if isinstance(owner, _BaseDataLoaderIter) and vars(owner) is item]
        elif isinstance(item, _BaseDataLoaderIter) and item._index_sampler is sampler:
            found.append(item)
    return found


def _observed(watch: LoaderWatch, iterator: _BaseDataLoaderIter) -> _BaseDataLoaderIter:
    """`iterator` with its batches shown to `watch` (the instance's methods wrapped, once)."""
    if "_next_data" in vars(iterator):
        return iterator
    watch.live = weakref.ref(iterator)
    indices: collections.deque[Any] = collections.deque()
    next_data, reset = iterator._next_data, iterator._reset
    if isinstance(iterator, _SingleProcessDataLoaderIter):  # a worker process draws ahead: its indices pair with no batch
        next_index = iterator._next_index

        def next_index_shown() -> Any:
            index = next_index()
            indices.append(index)
            return index

        iterator._next_index = next_index_shown

    def next_data_shown() -> Any:
        watch.starting()
        batch = next_data()
        watch.drawn(batch, indices.popleft() if indices else None)
        return batch

    def reset_shown(*args: Any, **kwargs: Any) -> None:  # a persistent worker pool's next epoch
        watch.starting()
        indices.clear()
        reset(*args, **kwargs)

    iterator._next_data, iterator._reset = next_data_shown, reset_shown
    return iterator


def batch_crc32c(batch: Any) -> str:
    """CRC32C of a batch: each tensor's dtype, shape and bytes, plain values by their repr, in order."""
    import crc32c

    value = 0
    for part in _parts(batch):
        value = crc32c.crc32c(part, value)
    return f"{value:08x}"


def _parts(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        yield f"{value.dtype}{tuple(value.shape)}".encode()
        yield tensor_bytes(value)
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield str(key).encode()
            yield from _parts(value[key])
    elif isinstance(value, (list, tuple)):
        yield f"{type(value).__name__}[{len(value)}]".encode()
        for item in value:
            yield from _parts(item)
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        yield repr(value).encode()
    else:  # an object of the loop's own: its content is not read (its repr may hold an address)
        yield type(value).__qualname__.encode()


def _sample_indices(index: Any) -> tuple[int, ...] | None:
    if isinstance(index, int):
        return (index,)
    if isinstance(index, Sequence) and all(isinstance(item, int) for item in index):
        return tuple(index)
    return None


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # an IterableDataset without __len__
        return None
