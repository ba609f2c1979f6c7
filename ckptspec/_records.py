"""Building blocks every manifest writer shares: files, producer, spec reference, pointers, digests."""

from __future__ import annotations

import os
import platform
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from pathlib import Path

from . import _crc32c as crc32c

from ._storage import RemotePath
from ._documents import save_document, spec_digest
from ._sidecars import manifest_path_for
from ._models import FileEntry, Integrity, Manifest, Producer, Spec, SpecRef
from ._scan import Algorithm, FileDigests, file_digests
from ._version import __version__

__all__ = [
    "crc32c_hex",
    "file_algorithms",
    "file_entry",
    "now_iso",
    "producer",
    "saved_algorithms",
    "sha256_file",
    "spec_ref",
    "write_manifest",
]


def crc32c_hex(data: bytes | memoryview) -> str:
    return f"{crc32c.crc32c(data):08x}"


def sha256_file(path: Path) -> str:
    return str(file_digests(path, ("sha256",)).sha256)


def file_algorithms(spec: Spec | None) -> tuple[Algorithm, ...]:
    """The whole-file digests a manifest records: the spec's `integrity.file_digest` (its default without a spec)."""
    setting = (spec.integrity if spec is not None else Integrity()).file_digest
    return () if setting == "none" else (setting,)


def saved_algorithms(recorded: Collection[Algorithm]) -> tuple[Algorithm, ...]:
    """The whole-file digests an adapter's save records: those it would record anyway, and CRC32C
    always, taken from the bytes as they are written: by it a reader tells whether the pending
    record an interrupted save left describes the file on disk (see `ckptspec._commit`)."""
    return tuple(dict.fromkeys(("crc32c", *recorded)))


def file_entry(
    path: Path, base: Path, *, algorithms: Collection[Algorithm], digests: FileDigests | None = None, size: int | None = None
) -> FileEntry:
    """A manifest `files:` entry for `path`, named relative to the manifest's directory `base`, with
    the digests named in `algorithms`: taken from `digests` when the writer computed them, else read;
    the size as given, else read.

    The name is the path as given, not where a symbolic link leads: validation reports a link out
    of the directory (CKS404) instead of following it."""
    if digests is None or not set(algorithms) <= set(digests.algorithms):
        digests = file_digests(path, algorithms) if algorithms else FileDigests()
    return FileEntry(
        path=path.relative_to(base).as_posix() if isinstance(path, RemotePath) else Path(os.path.relpath(path, base)).as_posix(),
        size=path.stat().st_size if size is None else size,
        sha256=digests.sha256 if "sha256" in algorithms else None,
        crc32c=digests.crc32c if "crc32c" in algorithms else None,
    )


def producer(frameworks: Mapping[str, str]) -> Producer:
    return Producer(ckptspec=__version__, python=platform.python_version(), frameworks=dict(frameworks))


def spec_ref(spec: Spec) -> SpecRef:
    return SpecRef(name=spec.name, sha256=spec_digest(spec), document=spec)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_manifest(manifest: Manifest, checkpoint: str | Path, *, durable: bool = True) -> Path:
    """Write `manifest` atomically as `<checkpoint>.ckptspec.yaml`; returns the manifest's path.

    Adapters pass `durable=False`: a manifest need not outlive a power loss that its checkpoint,
    which the frameworks do not fsync, would not survive either.
    """
    path = manifest_path_for(checkpoint)
    save_document(manifest, path, durable=durable)
    return path
