"""Ambiguous zip layouts assembled byte by byte from the records of two real torch.save archives.

`benign` and `malicious` are both written by torch.save with the same root and the same storages; only
their `data.pkl` differs (the malicious one also pickles a call to `os.system`). Each layout arranges
the records so that one zip reader can find the benign pickle while another (torch's) finds the
malicious one, or so that the archive can be read more than one way.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO


@dataclass(frozen=True)
class Member:
    name: bytes
    data: bytes
    local_name: bytes | None = None
    deflate: bool = False
    descriptor_size: int | None = None
    """Write a data descriptor after the bytes (as torch.save does), claiming this size."""
    zip64_sizes: tuple[int, ...] = ()
    """Give the directory's sizes as 0xFFFFFFFF and these in Zip64 fields, one field per size."""

    @property
    def flags(self) -> int:
        return 0 if self.descriptor_size is None else 0x08

    @property
    def stored(self) -> bytes:
        if not self.deflate:
            return self.data
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        return packer.compress(self.data) + packer.flush()

    def local(self) -> bytes:
        name = self.name if self.local_name is None else self.local_name
        header = struct.pack(
            "<4s5H3L2H", b"PK\x03\x04", 20, self.flags, 8 if self.deflate else 0, 0, 0, zlib.crc32(self.data),
            len(self.stored), len(self.data), len(name), 0,
        )  # fmt: skip
        if self.descriptor_size is None:
            return header + name + self.stored
        descriptor = struct.pack("<4s3L", b"PK\x07\x08", zlib.crc32(self.data), self.descriptor_size, self.descriptor_size)
        return header + name + self.stored + descriptor

    def central(self, offset: int) -> bytes:
        extra = b"".join(struct.pack("<2H2Q", 1, 16, size, size) for size in self.zip64_sizes)
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if self.zip64_sizes else (len(self.stored), len(self.data))
        header = struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 45, 45, self.flags, 8 if self.deflate else 0, 0, 0, zlib.crc32(self.data),
            *sizes, len(self.name), len(extra), 0, 0, 0, 0, offset,
        )  # fmt: skip
        return header + self.name + extra


def end_record(entries: int, size: int, offset: int) -> bytes:
    return struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, size, offset, 0)


def zip64_end(entries: int, size: int, offset: int) -> bytes:
    return struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset)


def zip64_locator(at: int) -> bytes:
    return struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)


def pack(members: list[Member], start: int = 0) -> tuple[bytes, bytes, list[int]]:
    """Local records laid out from `start`, their central directory, and their offsets."""
    body, offsets = b"", []
    for member in members:
        offsets.append(start + len(body))
        body += member.local()
    directory = b"".join(member.central(offset) for member, offset in zip(members, offsets))
    return body, directory, offsets


def plain(members: list[Member]) -> bytes:
    body, directory, _ = pack(members)
    return body + directory + end_record(len(members), len(directory), len(body))


def read_members(source: Path | BinaryIO) -> list[Member]:
    with zipfile.ZipFile(source) as archive:
        return [Member(info.filename.encode(), archive.read(info)) for info in archive.infolist()]


@dataclass(frozen=True)
class Sources:
    """The records of two torch.save archives with the same root and storages."""

    benign: list[Member]
    malicious: list[Member]

    @property
    def root(self) -> bytes:
        return self.benign[0].name.partition(b"/")[0]

    def pickle(self, which: list[Member]) -> Member:
        return next(member for member in which if member.name == self.root + b"/data.pkl")

    def rest(self) -> list[Member]:
        return [member for member in self.benign if member.name != self.root + b"/data.pkl"]


def duplicate_name(s: Sources) -> bytes:
    """Two `data.pkl` entries: a reader that takes the first of a name finds the benign one; torch's
    binary search over the sorted names finds the last here (in another order, the other one)."""
    return plain([s.pickle(s.benign), *s.rest(), s.pickle(s.malicious)])


def case_folded_duplicate(s: Sources) -> bytes:
    """`data.pkl` and `DATA.PKL`: a case-sensitive reader takes the benign one; torch ignores case."""
    shouting = replace(s.pickle(s.malicious), name=s.root + b"/DATA.PKL")
    return plain([s.pickle(s.benign), *s.rest(), shouting])


def nul_in_name(s: Sources) -> bytes:
    """`data.pkl\\0x` reads as `data.pkl` to `zipfile` (the last one wins), never to torch."""
    hidden = replace(s.pickle(s.benign), name=s.root + b"/data.pkl\x00x")
    return plain([s.pickle(s.malicious), *s.rest(), hidden])


def end_record_elsewhere(s: Sources) -> bytes:
    """Two directories. The end record's offset names the malicious one (torch reads it); its size
    and position name the benign one right before it, which `zipfile` reads, shifting the benign
    directory's offsets by the difference (as it does for archives glued behind other data)."""
    evil_body, evil_directory, _ = pack([s.pickle(s.malicious), *s.rest()])
    good_body, _, _ = pack([s.pickle(s.benign), *s.rest()], len(evil_body))
    _, good_directory, _ = pack([s.pickle(s.benign), *s.rest()], len(evil_body) - len(evil_directory))
    evil_directory_at = len(evil_body) + len(good_body)
    end = end_record(len(s.benign), len(good_directory), evil_directory_at)
    return evil_body + good_body + evil_directory + good_directory + end


def zip64_locator_elsewhere(s: Sources) -> bytes:
    """The Zip64 locator points at the malicious end record; `zipfile` reads the benign one right
    before the locator instead."""
    evil_body, evil_directory, _ = pack([s.pickle(s.malicious), *s.rest()])
    evil_end_at = len(evil_body) + len(evil_directory)
    evil = evil_body + evil_directory + zip64_end(len(s.malicious), len(evil_directory), len(evil_body))
    good_body, good_directory, _ = pack([s.pickle(s.benign), *s.rest()], len(evil))
    good_directory_at = len(evil) + len(good_body)
    good_end = zip64_end(len(s.benign), len(good_directory), good_directory_at)
    tail = zip64_locator(evil_end_at) + end_record(len(s.benign), len(good_directory), good_directory_at)
    return evil + good_body + good_directory + good_end + tail


def local_name_differs(s: Sources) -> bytes:
    """The directory's `data.pkl` is a local record that calls itself `data.bak`: a reader walking
    local headers sees no pickle under that name (and finds another one elsewhere)."""
    return plain([replace(s.pickle(s.malicious), local_name=s.root + b"/data.bak"), *s.rest()])


def hidden_record_between(s: Sources) -> bytes:
    """A benign `data.pkl` local record that the directory does not list, between listed ones: a
    reader walking local headers takes the first pickle it meets, torch the listed malicious one."""
    listed = [s.pickle(s.malicious), *s.rest()]
    body, offsets = b"", []
    for index, member in enumerate(listed):
        if index == 1:
            body += s.pickle(s.benign).local()
        offsets.append(len(body))
        body += member.local()
    directory = b"".join(member.central(offset) for member, offset in zip(listed, offsets))
    return body + directory + end_record(len(listed), len(directory), len(body))


def prepended_archive(s: Sources) -> bytes:
    """A benign archive glued in front of a malicious one: every reader uses the last end record."""
    benign = plain([s.pickle(s.benign), *s.rest()])
    body, directory, _ = pack([s.pickle(s.malicious), *s.rest()], len(benign))
    return benign + body + directory + end_record(len(s.malicious), len(directory), len(benign) + len(body))


def overlapping_records(s: Sources) -> bytes:
    """A second entry (`extra`) whose bytes are the malicious pickle's own, read twice."""
    members = [s.pickle(s.malicious), *s.rest()]
    body, directory, offsets = pack(members)
    ghost = Member(s.root + b"/extra", members[0].data).central(offsets[0])
    directory += ghost
    return body + directory + end_record(len(members) + 1, len(directory), len(body))


def deflated_pickle(s: Sources) -> bytes:
    """The malicious pickle deflated: torch inflates it, a reader of stored bytes sees noise."""
    return plain([replace(s.pickle(s.malicious), deflate=True), *s.rest()])


def descriptor_disagrees(s: Sources) -> bytes:
    """The data descriptor after the pickle claims fewer bytes than the directory: a streaming reader
    stops early and sees another pickle, torch reads the size the directory gives."""
    pickle = s.pickle(s.malicious)
    return plain([replace(pickle, descriptor_size=len(pickle.data) - 1), *s.rest()])


def two_zip64_fields(s: Sources) -> bytes:
    """The pickle's sizes in two Zip64 fields that disagree: torch takes the first, other readers the last."""
    pickle = s.pickle(s.malicious)
    return plain([replace(pickle, zip64_sizes=(len(pickle.data), len(pickle.data) - 1)), *s.rest()])


def trailing_bytes(s: Sources) -> bytes:
    """Bytes after the end record that are not its comment."""
    return plain([s.pickle(s.malicious), *s.rest()]) + b"PK\x03\x04 appended after the end"


def upper_case_pickle_name(s: Sources) -> bytes:
    """Not ambiguous: the only pickle is `DATA.PKL`, which torch loads as `data.pkl` (it ignores case)."""
    return plain([replace(s.pickle(s.malicious), name=s.root + b"/DATA.PKL"), *s.rest()])


def zip64_sizes(s: Sources) -> bytes:
    """Not ambiguous: every size in the directory deferred to one Zip64 field, as large records have."""
    return plain([replace(member, zip64_sizes=(len(member.data),)) for member in [s.pickle(s.malicious), *s.rest()]])


READ_AS_TORCH_READS: dict[str, Callable[[Sources], bytes]] = {
    "upper-case-pickle-name": upper_case_pickle_name,
    "zip64-sizes": zip64_sizes,
}
"""Unusual but unambiguous layouts: ckptspec reads the records torch reads."""

LAYOUTS: dict[str, Callable[[Sources], bytes]] = {
    "duplicate-name": duplicate_name,
    "case-folded-duplicate": case_folded_duplicate,
    "nul-in-name": nul_in_name,
    "end-record-elsewhere": end_record_elsewhere,
    "zip64-locator-elsewhere": zip64_locator_elsewhere,
    "local-name-differs": local_name_differs,
    "hidden-record-between": hidden_record_between,
    "prepended-archive": prepended_archive,
    "overlapping-records": overlapping_records,
    "deflated-pickle": deflated_pickle,
    "descriptor-disagrees": descriptor_disagrees,
    "two-zip64-fields": two_zip64_fields,
    "trailing-bytes": trailing_bytes,
}
