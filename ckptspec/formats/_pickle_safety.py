"""A pickle reader that never runs code from the file.

`RestrictedUnpickler` subclasses the C `pickle.Unpickler`. Every class or function a pickle names goes
through `find_class`, which returns only what the caller's builder table maps the name to (ckptspec's
own inert builders) or a fresh `Stub` class that records how it was called and never does anything else.
The one path that bypasses `find_class` in CPython, the EXT opcodes (whose objects come from
`copyreg._extension_cache` when present), is rewritten before unpickling so it goes through
`find_class` too.
"""

from __future__ import annotations

import _compat_pickle
import copyreg
import io
import pickle
import pickletools
import re
import struct
import types
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Literal

__all__ = [
    "EXTENSION_MODULE",
    "RestrictedUnpickler",
    "Safety",
    "SealedBuilder",
    "Stub",
    "classify_global",
    "stub_class",
]

Safety = Literal["allowed", "unknown", "dangerous"]
EXTENSION_MODULE = "copyreg.extension"
"""Module name recorded for an EXT opcode whose code this process has not registered."""

_DANGEROUS_MODULES = frozenset(
    {
        "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "sys", "shutil", "socket", "runpy",
        "importlib", "imp", "zipimport", "pkgutil", "pickle", "_pickle", "pickletools", "marshal", "shelve",
        "dill", "cloudpickle", "pty", "webbrowser", "code", "codeop", "ctypes", "_ctypes", "multiprocessing",
        "_posixsubprocess", "signal", "_thread", "threading", "asyncio", "pathlib", "io", "_io", "tempfile",
        "glob", "fileinput", "urllib", "http", "ftplib", "smtplib", "telnetlib", "requests", "platform",
        "operator", "functools", "types", "inspect", "gc", "builtins.__dict__", "commands", "popen2",
        "torch.hub", "torch.package", "torch.jit", "torch._C", "torch.ops", "timeit", "pdb", "bdb",
        "trace", "cProfile", "profile", "site", "sysconfig", "distutils", "setuptools", "pip",
    }
)
_DANGEROUS_NAMES = frozenset(
    {
        "eval", "exec", "execfile", "compile", "open", "getattr", "setattr", "delattr", "__import__",
        "apply", "input", "breakpoint", "globals", "locals", "vars", "system", "popen", "spawn", "load",
        "loads", "run", "call", "check_call", "check_output", "Popen", "execv", "execve", "execvp",
        "fork", "remove", "unlink", "rmtree", "__getattribute__", "__reduce__", "__reduce_ex__",
        "__setstate__", "__builtins__", "__globals__", "__code__", "attrgetter", "methodcaller",
        "_load_from_bytes",  # torch.storage: torch.load(weights_only=False) on bytes inside the pickle
    }
)
# Value types and constants: building them, even with a real unpickler, runs no code of the file's.
_HARMLESS_BUILTINS = frozenset(
    {"set", "frozenset", "bytearray", "complex", "slice", "int", "float", "str", "bytes", "bool", "tuple",
     "list", "dict", "range", "NotImplemented", "Ellipsis"}
)
_HARMLESS_GLOBALS = frozenset(
    {("collections", "defaultdict"), ("collections", "Counter"), ("collections", "deque"), ("typing", "Any")}
)
_EXTENSION_OPS = frozenset({"EXT1", "EXT2", "EXT4"})


def _extensions_registered() -> bool:
    """Whether an EXT opcode could resolve without `find_class` (copyreg's registry or cache in use)."""
    return bool(copyreg._inverted_registry or copyreg._extension_cache)  # type: ignore[attr-defined]


def classify_global(module: str, name: str, allowed: Mapping[tuple[str, str], object]) -> Safety:
    """How safe it is for a checkpoint to name `module.name`: in the builder table, harmless, or a
    way to run code (process, file, import, attribute and pickle machinery)."""
    if (module, name) in allowed or (module, name) in _HARMLESS_GLOBALS:
        return "allowed"
    if any(part in _DANGEROUS_NAMES for part in name.split(".")):
        return "dangerous"
    if module in {"builtins", "__builtin__"}:
        if name in _HARMLESS_BUILTINS:
            return "allowed"
        return "unknown" if name == "object" else "dangerous"
    if any(module == prefix or module.startswith(prefix + ".") for prefix in _DANGEROUS_MODULES):
        return "dangerous"
    if module == EXTENSION_MODULE:
        return "dangerous"
    return "unknown"


class Stub:
    """An object a pickle built from a global ckptspec does not know. It records and never acts.

    `find_class` returns a new subclass per global (`module`, `name` on the class), so NEWOBJ, INST and
    OBJ (which need a type) work; REDUCE, BUILD, SETITEMS, APPENDS and ADDITEMS land on the recorders
    below. Nothing the file supplies is ever called.
    """

    module: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        instance = object.__new__(cls)
        object.__setattr__(instance, "_record", _StubRecord(args, kwargs))
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
        return stub_class(type(self).module, f"{type(self).name}()")(*args, **kwargs)

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


def _python3_name(module: str, name: str) -> tuple[str, str]:
    """Protocol 0-2 pickles spell some globals the Python 2 way (`__builtin__.set`); read them as
    `pickle` itself does with `fix_imports`, so the safety table sees the real target."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def stub_class(module: str, name: str) -> type[Stub]:
    """A fresh `Stub` subclass standing for `module.name`: calling it records the arguments, nothing else."""
    return type(_class_name(name), (Stub,), {"module": module, "name": name, "__module__": __name__})


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


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles with a builder table instead of imports, and counts every global the pickle names.

    Args:
        data: the pickle bytes.
        builders: `(module, name)` → the inert object `find_class` returns for it.
        persistent_load: called with each persistent id (torch storages); must itself be inert.
    """

    def __init__(
        self,
        data: bytes,
        builders: Mapping[tuple[str, str], object],
        persistent_load: Callable[[Any], Any],
    ) -> None:
        self._extension_codes: list[int] = []
        self._data = data
        if _extensions_registered():
            data = self._route_extensions_through_find_class(data)
        super().__init__(io.BytesIO(data))
        self._builders = {key: _seal(builder) for key, builder in builders.items()}
        self._load_persistent = persistent_load
        self._stubs: dict[tuple[str, str], type[Stub]] = {}
        self.globals_seen: Counter[tuple[str, str]] = Counter()

    def load(self) -> Any:  # noqa: D102 - pickle API
        """With no extension registered in this process, CPython refuses every EXT opcode, so the
        opcode walk that reroutes them runs only for a pickle that holds one, on a second read."""
        try:
            return super().load()
        except ValueError as exc:
            if self._extension_codes or not str(exc).startswith("unregistered extension code"):
                raise
        self.globals_seen.clear()
        super().__init__(io.BytesIO(self._route_extensions_through_find_class(self._data)))
        return super().load()

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle API
        module, name = _python3_name(module, name)
        self.globals_seen[(module, name)] += 1
        builder = self._builders.get((module, name))
        if builder is not None:
            return builder
        if (module, name) not in self._stubs:
            self._stubs[(module, name)] = stub_class(module, name)
        return self._stubs[(module, name)]

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle API
        if type(pid) is int and self._extension_codes:
            return self._resolve_extension(pid)
        return self._load_persistent(pid)

    def safety(self) -> dict[tuple[str, str], Safety]:
        return {key: classify_global(*key, self._builders) for key in self.globals_seen}

    def _resolve_extension(self, code: int) -> Any:
        # Same lookup CPython does for EXT, minus its cache: the registry gives a name, never an object.
        registered = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]
        if registered is None:
            return self.find_class(EXTENSION_MODULE, str(code))
        return self.find_class(*registered)

    def _route_extensions_through_find_class(self, data: bytes) -> bytes:
        """Rewrite each EXTn as `BININT code; BINPERSID`, so `persistent_load` resolves it by name.

        CPython pushes a cached object for a known EXT code without asking `find_class`; that cached
        object may be a real callable.
        """
        pieces: list[bytes] = []
        cursor = 0
        operations = list(pickletools.genops(data))
        for index, (opcode, argument, position) in enumerate(operations):
            if opcode.name == "FRAME":
                pieces.append(data[cursor:position])
                cursor = operations[index + 1][2] if index + 1 < len(operations) else len(data)
            elif opcode.name in _EXTENSION_OPS:
                self._extension_codes.append(argument)
                end = operations[index + 1][2] if index + 1 < len(operations) else len(data)
                pieces.append(data[cursor:position])
                pieces.append(b"J" + struct.pack("<i", argument) + b"Q")
                cursor = end
        if not self._extension_codes:
            return data
        pieces.append(data[cursor:])
        return b"".join(pieces)
