"""Which checkpoint a zip archive holds: a torch.save archive, a TorchScript or Keras archive, or
another archive of pickles.
"""

from __future__ import annotations

import mmap

from .._exceptions import CkptspecError, ReaderError, UnsupportedFormatError
from .._storage import Location, RemotePath
from ._io import unreadable
from ._names import TORCHSCRIPT_CONSTANTS, Kind

__all__ = ["torch_could_load", "zip_kind"]


def zip_kind(path: Location) -> Kind:
    """Which zip-based checkpoint `path` is. torch.save writes FOLDER/data.pkl first: that common case
    is told by the first name, without parsing the archive; TorchScript and Keras archives are told
    by their records."""
    if isinstance(path, RemotePath):
        from ._source import open_source

        source = open_source(path)
        try:
            length = int.from_bytes(source.pread(26, 2), "little")
            if source.pread(30, length).endswith(b"/data.pkl"):
                return "torch-zip"
            from .keras import is_keras_archive

            if is_keras_archive(path, source):  # type: ignore[arg-type]
                return "keras"
        finally:
            source.close()
        return _other_zip_kind(path)
    try:
        with path.open("rb") as handle:
            handle.seek(26)
            length = int.from_bytes(handle.read(2), "little")
            handle.seek(30)
            if handle.read(length).endswith(b"/data.pkl"):
                return "torch-zip"
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                from .keras import is_keras_archive

                if is_keras_archive(path, data):
                    return "keras"
    except (OSError, ValueError) as exc:
        raise unreadable(path, exc) from None
    return _other_zip_kind(path)


def _other_zip_kind(path: Location) -> Kind:
    if _is_torchscript_archive(path):
        return "torchscript"
    return "torch-zip" if isinstance(path, RemotePath) or torch_could_load(path) else "archive"


def _is_torchscript_archive(path: Location) -> bool:
    """Whether the zip archive at `path` is a TorchScript archive (it has `constants.pkl`)."""
    from ._zip_records import ZipArchive

    try:
        archive = ZipArchive(path)
    except ReaderError:
        return False  # the torch.save reader names what is wrong with it
    try:
        return archive.record(TORCHSCRIPT_CONSTANTS) is not None
    finally:
        archive.close()


def torch_could_load(path: Location) -> bool:
    """Whether torch's reader might take the archive at `path` for its own: anything but a clean
    "no FOLDER/data.pkl" from the strict reader, which sees what torch's reader sees (an archive
    read one way as NumPy's is never judged less strictly than torch would load it)."""
    from ._zip_records import ZipArchive

    try:
        ZipArchive(path).close()
    except UnsupportedFormatError:
        return False
    except (CkptspecError, OSError):
        return True
    return True
