"""A store that misbehaves on demand: fsspec's memory filesystem under its own protocol and with its
own objects, whose ranged reads can come back short and whose keys can be anything a bucket holds."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

fsspec = pytest.importorskip("fsspec")

from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

PROTOCOL = "hostilememory"


class HostileStore(MemoryFileSystem):
    """`short_by` bytes are cut from every ranged read (a server answering a range with fewer
    bytes than asked, or an object truncated while it is read); with `ignore_range` every read gets
    the whole object (a server that does not honour ranges)."""

    protocol = (PROTOCOL,)
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    short_by = 0
    ignore_range = False

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(path.removeprefix(f"{PROTOCOL}://")))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        if type(self).ignore_range:
            return bytes(super().cat_file(path))
        data = super().cat_file(path, start=start, end=end, **kwargs)
        return data[: max(0, len(data) - type(self).short_by)] if start is not None else data

    @classmethod
    def reset(cls) -> None:
        cls.store.clear()
        cls.pseudo_dirs[:] = [""]
        cls.short_by = 0
        cls.ignore_range = False

    @classmethod
    def put_raw(cls, key: str, payload: bytes) -> None:
        """An object under exactly `key`, as a bucket keeps `a/../b` or `a//b` without normalising them."""
        cls().pipe_file("/staging-object", payload)
        cls.store[key] = cls.store.pop("/staging-object")


fsspec.register_implementation(PROTOCOL, HostileStore, clobber=True)
