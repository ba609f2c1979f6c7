"""A pickle reader that never runs code from the file.

`RestrictedUnpickler` subclasses the C `pickle.Unpickler`, the parser `torch.load` and `pickle.load`
use, so ckptspec reads the bytes as they would. Every class or function a pickle names goes through
`find_class`, which returns only what the caller's builder table maps the name to (ckptspec's own inert
builders) or a fresh `Stub` class that records how it was called and never does anything else. Before
the C unpickler runs, the opcode walk (`_pickle_scan.scan_pickle`) refuses bytes that would make it
allocate beyond what is present and notes every global the bytes name, so a pickle that stops reading
half-way still names its dangers; the EXT opcodes it finds are rewritten here so they reach
`find_class` too.

A global is judged by `_pickle_policy.classify_global`: allowed only when it is on the allow-list,
exactly; everything else would make `torch.load(weights_only=False)` import a module and call into
it, and is dangerous.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import re
import struct
import types
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .._exceptions import CkptspecError, CorruptCheckpointError
from .._framework_records import RECORDS, record_stub_class
from .._pickle_policy import EXTENSION_MODULE, Safety, classify_global
from ._inspection import GlobalRef
from ._pickle_scan import PickleScan, python3_name, scan_pickle
from ._pickle_values import GENERIC_BUILDERS, copy_budget

__all__ = [
    "PickleReadStopped",
    "RestrictedUnpickler",
    "SealedBuilder",
    "Stub",
    "classify_pickle_stream",
    "global_refs",
    "load_untrusted",
    "stub_class",
]


NESTING_LIMIT = 3
"""Pickles inside pickles (bytes handed to a loader) are inspected this many levels deep."""


class Stub:
    """An object a pickle built from a global ckptspec does not know. It records and never acts.

    `find_class` returns a new subclass per global (`module`, `name` on the class), so NEWOBJ, INST and
    OBJ (which need a type) work; REDUCE, BUILD, SETITEMS, APPENDS and ADDITEMS land on the recorders
    below. Nothing the file supplies is ever called.
    """

    module: ClassVar[str] = ""
    name: ClassVar[str] = ""
    payloads: ClassVar[list[bytes]]
    """Bytes arguments it was called with: what a loader (`pickle.loads`, `_load_from_bytes`) would read."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        instance = object.__new__(cls)
        object.__setattr__(instance, "_record", _StubRecord(args, kwargs))
        cls.payloads.extend(value for value in (*args, *kwargs.values()) if isinstance(value, (bytes, bytearray)))
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Arguments were recorded by `__new__`; nothing else happens."""

    def __setstate__(self, state: Any) -> None:
        self._record.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self._record.items[key] = value

    def append(self, value: Any) -> None:
        self._record.list_items.append(value)

    def extend(self, values: Any) -> None:
        self._record.list_items.extend(values)

    def add(self, value: Any) -> None:
        self._record.list_items.append(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Stub:
        """A stub instance used as a callable (REDUCE on it) yields another inert stub."""
        return stub_class(type(self).module, f"{type(self).name}()", type(self).payloads)(*args, **kwargs)

    def __setattr__(self, key: str, value: Any) -> None:
        self._record.attributes[key] = value

    @property
    def qualname(self) -> str:
        return f"{type(self).module}.{type(self).name}"

    @property
    def args(self) -> tuple[Any, ...]:
        return self._record.args

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._record.kwargs

    @property
    def state(self) -> Any:
        return self._record.state

    @property
    def items(self) -> dict[Any, Any]:
        return self._record.items

    @property
    def list_items(self) -> list[Any]:
        return self._record.list_items

    @property
    def attributes(self) -> dict[str, Any]:
        return self._record.attributes

    def children(self) -> Iterator[tuple[str, Any]]:
        """What the stub recorded, under the names `args`, `kwargs`, `state`, `items`, `list_items`,
        `attributes` (each only when non-empty). These are the JSON Pointer segments below a stub."""
        record = self._record
        for label, value in (
            ("args", list(record.args)),
            ("kwargs", record.kwargs),
            ("state", record.state),
            ("items", record.items),
            ("list_items", record.list_items),
            ("attributes", record.attributes),
        ):
            if value is not None and value != [] and value != {}:
                yield label, value

    def __repr__(self) -> str:
        return f"<stub {self.qualname}>"


class _StubRecord:
    __slots__ = ("args", "kwargs", "state", "items", "list_items", "attributes")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.state: Any = None
        self.items: dict[Any, Any] = {}
        self.list_items: list[Any] = []
        self.attributes: dict[str, Any] = {}


def stub_class(module: str, name: str, payloads: list[bytes] | None = None) -> type[Stub]:
    """A fresh `Stub` subclass standing for `module.name`: calling it records the arguments, nothing
    else; bytes arguments are also appended to `payloads` (its own list when none is given)."""
    attributes = {"module": module, "name": name, "payloads": [] if payloads is None else payloads, "__module__": __name__}
    return type(_class_name(name), (Stub,), attributes)


def _class_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned.isidentifier() else f"_{cleaned}"


class SealedBuilder:
    """A builder function as the pickle sees it: callable, with no `__dict__` for BUILD to write
    into (a plain function's attributes would outlive this unpickling)."""

    __slots__ = ("_function",)

    def __init__(self, function: Callable[..., Any]) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(*args, **kwargs)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{self!r} is read-only")

    def __repr__(self) -> str:
        return f"<builder {getattr(self._function, '__name__', '?')}>"


def _seal(builder: object) -> object:
    if isinstance(builder, (types.FunctionType, types.MethodType)):
        return SealedBuilder(builder)
    return builder


class PickleReadStopped(CorruptCheckpointError):
    """A pickle that could not be read to its end; `globals` are those it named up to where it stopped."""

    def __init__(self, message: str, globals_named: Sequence[GlobalRef] = ()) -> None:
        super().__init__(message, globals_named=globals_named)


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles with a builder table instead of imports, and counts every global the pickle names.

    Args:
        data: the pickle bytes.
        builders: `(module, name)` → the inert object `find_class` returns for it.
        persistent_load: called with each persistent id (torch storages); must itself be inert.
        scan: what `scan_pickle` found in `data`.
        stubs, payloads: stub classes and the bytes their calls received, shared by the pickles of one
            stream (a fresh pair by default).
    """

    def __init__(
        self,
        data: bytes,
        builders: Mapping[tuple[str, str], object],
        persistent_load: Callable[[Any], Any],
        scan: PickleScan,
        stubs: dict[tuple[str, str], type[Stub]] | None = None,
        payloads: list[bytes] | None = None,
    ) -> None:
        self._extension_codes = [code for _, _, code in scan.extensions]
        super().__init__(_PeekableBytes(_route_extensions_through_find_class(data, scan) if scan.extensions else data))
        self._builders = builders
        self._load_persistent = persistent_load
        self._stubs = {} if stubs is None else stubs
        self.payloads = [] if payloads is None else payloads
        self.globals_seen: Counter[tuple[str, str]] = Counter()
        self._records: dict[tuple[str, str], type[Stub]] = {}

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle API
        module, name = python3_name(module, name)
        self.globals_seen[(module, name)] += 1
        builder = self._builders.get((module, name))
        if builder is not None:
            return _seal(builder)
        if (module, name) in RECORDS:  # stand-ins that count a record built otherwise as a global of its own
            if (module, name) not in self._records:
                self._records[(module, name)] = record_stub_class(stub_class(module, name, self.payloads), module, name, self.globals_seen)
            return self._records[(module, name)]
        if (module, name) not in self._stubs:
            self._stubs[(module, name)] = stub_class(module, name, self.payloads)
        return self._stubs[(module, name)]

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle API
        if type(pid) is int and self._extension_codes:
            return self._resolve_extension(pid)
        return self._load_persistent(pid)

    def _resolve_extension(self, code: int) -> Any:
        # Same lookup CPython does for EXT, minus its cache: the registry gives a name, never an object.
        registered = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]
        if registered is None:
            return self.find_class(EXTENSION_MODULE, str(code))
        return self.find_class(*registered)


class _PeekableBytes(io.BytesIO):
    """The unpickler's file. With `peek` the C unpickler takes the bytes in blocks instead of calling
    `read` for every opcode; `read` stays BytesIO's, which returns what there is: a length read from
    the pickle (a FRAME's) never sizes an allocation."""

    def peek(self, size: int = 1) -> bytes:
        at = self.tell()
        with self.getbuffer() as view:
            return bytes(view[at : at + max(size, 1)])


def _route_extensions_through_find_class(data: bytes, scan: PickleScan) -> bytes:
    """Rewrite each EXTn as `BININT code; BINPERSID`, so `persistent_load` resolves it by name.

    CPython pushes a cached object for a known EXT code without asking `find_class`; that cached
    object may be a real callable. Frames are dropped: the rewrite changes the lengths they declare.
    """
    replacements = sorted(
        [(begin, end, b"") for begin, end in scan.frames]
        + [(begin, end, b"J" + struct.pack("<i", code) + b"Q") for begin, end, code in scan.extensions]
    )
    pieces: list[bytes] = []
    cursor = 0
    for begin, end, replacement in replacements:
        pieces += [data[cursor:begin], replacement]
        cursor = end
    pieces.append(data[cursor:])
    return b"".join(pieces)


def global_refs(counts: Mapping[tuple[str, str], int], builders: Collection[tuple[str, str]] = ()) -> list[GlobalRef]:
    """Each global with its verdict and how often it is named, sorted by name. A reader's own
    `builders` (inert stand-ins for its format's classes, such as DCP's metadata dataclasses) are
    allowed besides the allow-list."""
    return [GlobalRef(module, name, _verdict(module, name, builders), count) for (module, name), count in sorted(counts.items())]


def _verdict(module: str, name: str, builders: Collection[tuple[str, str]]) -> Safety:
    return "allowed" if (module, name) in builders else classify_global(module, name)


COMPUTED_GLOBAL = ("<computed module>", "<computed name>")
"""What a STACK_GLOBAL is named as whose module and name are no strings the pickle holds but values
built by calls: the restricted unpickler gets no string to import, a real one may get any."""
_COMPUTED_NAME_REFUSED = "STACK_GLOBAL requires str"


def load_untrusted(
    data: bytes,
    source: str,
    builders: Mapping[tuple[str, str], object],
    persistent_load: Callable[[Any], Any],
    *,
    stream: bool = False,
) -> tuple[Any, list[GlobalRef]]:
    """Unpickle `data` with `builders` and stubs: the object tree, and every global it names, the
    globals of pickles inside it (bytes handed to a loader) included. With `stream`, the pickles
    that follow the first (`pickle.dump` called repeatedly) are judged too; the tree is the first's.

    Raises `PickleReadStopped`, carrying the globals named up to where reading stopped, when the
    pickle does not read to its end, `persistent_load` refusing an id included (its message kept).
    """
    scan = scan_pickle(data)
    if scan.problem is not None:
        stopped = f"{source} cannot be read: {scan.problem}{_named_dangers(scan.globals, builders)}"
        raise PickleReadStopped(stopped, global_refs(scan.globals, builders))
    unpickler = RestrictedUnpickler(data, builders, persistent_load, scan)
    try:
        with copy_budget(len(data)):
            tree = unpickler.load()
    except CkptspecError as exc:  # a persistent id the caller refused: what came before it still counts
        seen = scan.globals | unpickler.globals_seen
        raise PickleReadStopped(f"{exc}{_named_dangers(seen, builders)}", global_refs(seen, builders)) from None
    except Exception as exc:  # noqa: BLE001 - whatever the C unpickler raises on hostile bytes is a finding
        seen = scan.globals | unpickler.globals_seen
        if scan.unresolved and _COMPUTED_NAME_REFUSED in str(exc):
            seen[COMPUTED_GLOBAL] += 1  # names built by calls: what a looser loader imports is unknown, hence dangerous
        stopped = f"{source} {_read_problem(exc)}{_named_dangers(seen, builders)}"
        raise PickleReadStopped(stopped, global_refs(seen, builders)) from None
    seen = scan.globals | unpickler.globals_seen
    seen.update(_nested_globals(unpickler.payloads, NESTING_LIMIT))
    if stream and scan.end is not None:
        seen.update(_stream_globals(data, scan.end, NESTING_LIMIT)[0])
    return tree, global_refs(seen, builders)


def classify_pickle_stream(data: bytes, start: int = 0) -> tuple[list[GlobalRef], int]:
    """Judge every pickle in a stream of concatenated pickles (`pickle.dump` called repeatedly, the
    legacy `torch.save` format), from `start` until the bytes are no longer a pickle: every global
    they name, pickles inside them included, and the offset where the pickles end.

    Persistent ids are kept as the values they are; nothing is located or read beyond the pickles.
    """
    counts, end = _stream_globals(data, start, NESTING_LIMIT)
    return global_refs(counts), end


def _stream_globals(data: bytes, start: int, depth: int) -> tuple[Counter[tuple[str, str]], int]:
    counts: Counter[tuple[str, str]] = Counter()
    stubs: dict[tuple[str, str], type[Stub]] = {}
    payloads: list[bytes] = []
    cursor = start
    while cursor < len(data):
        scan = scan_pickle(data, cursor)
        if scan.end is None:
            if cursor == start or data[cursor : cursor + 1] == pickle.PROTO:
                counts.update(scan.globals)  # a pickle that stops half-way has still run what it named so far
            break
        seen = scan.globals
        if _unpickling_names_more(scan):
            unpickler = RestrictedUnpickler(data[cursor : scan.end], GENERIC_BUILDERS, _keep_persistent_id, scan, stubs, payloads)
            try:
                with copy_budget(scan.end - cursor):
                    unpickler.load()
            except Exception:  # noqa: BLE001, S110 - the scan already named what these bytes would call
                pass
            seen = seen | unpickler.globals_seen
        counts.update(seen)
        cursor = scan.end
    if depth > 0:
        counts.update(_nested_globals(payloads, depth - 1))
    return counts, cursor


_BYTES_BUILDERS = frozenset({("_codecs", "encode"), ("builtins", "bytearray"), ("builtins", "bytes")})


def _unpickling_names_more(scan: PickleScan) -> bool:
    """Whether the unpickler could name globals the walk did not: a STACK_GLOBAL whose strings the
    walk could not follow, an EXT code, a framework record built otherwise than its framework builds
    it, or bytes that a call could receive as a pickle to load.
    Otherwise the walk named exactly what the unpickler would, and a stream need not be unpickled."""
    carries_bytes = scan.byte_values or _BYTES_BUILDERS & scan.globals.keys()
    builds_records = RECORDS.keys() & scan.globals.keys()  # judged by how they are built
    return bool(scan.unresolved or scan.extensions or builds_records or (scan.globals and carries_bytes))


def _nested_globals(payloads: list[bytes], depth: int) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    inspected: set[int] = set()
    for payload in payloads:
        if id(payload) not in inspected and len(payload) > 1:  # the shortest pickle, `N.`, has two bytes
            inspected.add(id(payload))
            counts |= _stream_globals(bytes(payload), 0, depth)[0]
    return counts


def _keep_persistent_id(pid: Any) -> Any:
    return pid


def _read_problem(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nests too deeply to read"
    if isinstance(exc, MemoryError):
        return "asks for more memory than is available"
    return f"cannot be read: {type(exc).__name__}: {_bounded(str(exc))}"


def _named_dangers(counts: Mapping[tuple[str, str], int], builders: Collection[tuple[str, str]] = ()) -> str:
    dangerous = [f"{module}.{name}" for module, name in sorted(counts) if _verdict(module, name, builders) == "dangerous"]
    return f"; it names dangerous globals: {', '.join(dangerous)}" if dangerous else ""


def _bounded(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
