"""Real code-execution pickles, each built from a global of a different module.

Every gadget is a function of a marker path returning pickle bytes (protocol 4, so dotted names
resolve as attribute chains) that make `pickle.load` create the marker. The opcodes are written by
hand so each payload names exactly the globals listed with it; the conftest proves each one runs
under the real loader before ckptspec's verdict on it counts.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Ops(bytes):
    """Opcodes that push one value, to be used as an argument as they are."""


def name(module: str, attribute: str) -> Ops:
    """STACK_GLOBAL: the object `module.attribute` (an attribute chain when dotted)."""
    return Ops(_string(module) + _string(attribute) + b"\x93")


def call(function: bytes, *arguments: Any) -> Ops:
    """REDUCE: `function(*arguments)`; an argument is a plain value or `Ops`."""
    return Ops(function + b"(" + b"".join(_value(argument) for argument in arguments) + b"tR")


def whole(ops: bytes) -> bytes:
    """A complete pickle holding `ops`."""
    return b"\x80\x04" + ops + b"."


def _string(text: str) -> bytes:
    encoded = text.encode()
    return b"X" + struct.pack("<I", len(encoded)) + encoded


def _value(value: Any) -> bytes:
    if isinstance(value, Ops):
        return value
    return pickle.dumps(value, protocol=3)[2:-1]  # no PROTO, no STOP: protocol 3 has no frames


def _touch_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()"


@dataclass(frozen=True)
class Gadget:
    name: str
    build: Callable[[Path], bytes]
    """marker → pickle bytes."""
    named: str
    """A global ckptspec must report as dangerous (the one the payload hinges on)."""


def _nested_pickle(marker: Path) -> bytes:
    inner = f"cos\nsystem\n(V touch {marker}\ntR.".encode()  # protocol 0, as text
    return whole(call(name("pickle", "loads"), inner))


def _legacy_torch_bytes(marker: Path) -> bytes:
    """`torch.storage._load_from_bytes` runs `torch.load(weights_only=False)` on legacy-format bytes."""
    import torch

    buffer = io.BytesIO()
    torch.save({"hp": _Reduces("os", "system", f"touch {marker}")}, buffer, _use_new_zipfile_serialization=False)
    return whole(call(name("torch.storage", "_load_from_bytes"), buffer.getvalue()))


class _Reduces:
    """Pickles as `module.attribute(*arguments)` through the pickler's own reduce path."""

    def __init__(self, module: str, attribute: str, *arguments: Any) -> None:
        self.target = (module, attribute)
        self.arguments = arguments

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        import importlib

        module, attribute = self.target
        return getattr(importlib.import_module(module), attribute), self.arguments


GADGETS = [
    Gadget("os-system", lambda m: whole(call(name("os", "system"), f"touch {m}")), "os.system"),
    Gadget("subprocess-check-call", lambda m: whole(call(name("subprocess", "check_call"), ["touch", str(m)])),
           "subprocess.check_call"),
    Gadget("builtins-exec", lambda m: whole(call(name("builtins", "exec"), _touch_code(m))), "builtins.exec"),
    Gadget("pydoc-pipepager", lambda m: whole(call(name("pydoc", "pipepager"), "", f"touch {m}")), "pydoc.pipepager"),
    Gadget("uuid-command", lambda m: whole(call(name("uuid", "_get_command_stdout"), "touch", str(m))),
           "uuid._get_command_stdout"),
    Gadget("doctest-examples", lambda m: whole(call(name("doctest", "run_docstring_examples"), f">>> {_touch_code(m)}\n", {})),
           "doctest.run_docstring_examples"),
    Gadget("logging-config-factory", lambda m: whole(call(name("logging.config", "dictConfig"), {
        "version": 1, "handlers": {"h": {"()": "subprocess.getoutput", "cmd": f"touch {m}"}}})), "logging.config.dictConfig"),
    Gadget("idlelib-eval", lambda m: whole(call(name("idlelib.calltip", "get_entity"), _touch_code(m))),
           "idlelib.calltip.get_entity"),
    Gadget("numpy-testing-exec", lambda m: whole(call(name("numpy.testing._private.utils", "runstring"), _touch_code(m), {})),
           "numpy.testing._private.utils.runstring"),
    Gadget("torch-fx-exec", lambda m: whole(call(name("torch.fx.graph_module", "_exec_with_source"), _touch_code(m), {})),
           "torch.fx.graph_module._exec_with_source"),
    Gadget("torch-utils-shell", lambda m: whole(call(name("torch.utils.collect_env", "run"), f"touch {m}")),
           "torch.utils.collect_env.run"),
    Gadget("venv-create", lambda m: whole(call(name("venv", "create"), str(m))), "venv.create"),
    Gadget("sqlite3-connect", lambda m: whole(call(name("sqlite3", "connect"), str(m))), "sqlite3.connect"),
    Gadget("cprofile-run", lambda m: whole(call(name("cProfile", "run"), _touch_code(m))), "cProfile.run"),
    Gadget("shutil-copyfile", lambda m: whole(call(name("shutil", "copyfile"), "/dev/null", str(m))), "shutil.copyfile"),
    Gadget("functools-partial", lambda m: whole(call(call(name("functools", "partial"), name("os", "system"), f"touch {m}"))),
           "functools.partial"),
    Gadget("omegaconf-import-by-string", lambda m: whole(call(call(name("omegaconf._utils", "_get_class"), "subprocess", "Popen"),
                                                              ["touch", str(m)])), "omegaconf._utils._get_class"),
    Gadget("code-interpreter-dotted", lambda m: whole(call(name("code", "InteractiveInterpreter.runsource"),
                                                           call(name("code", "InteractiveInterpreter")), _touch_code(m))),
           "code.InteractiveInterpreter.runsource"),
    Gadget("pathlib-touch-dotted", lambda m: whole(call(name("pathlib", "Path.touch"), call(name("pathlib", "PosixPath"), str(m)))),
           "pathlib.Path.touch"),
    Gadget("builtins-through-allowed-builder", lambda m: whole(call(
        call(name("collections", "OrderedDict.get"), name("torch._utils", "_rebuild_tensor_v2.__builtins__"), "exec"),
        _touch_code(m))), "torch._utils._rebuild_tensor_v2.__builtins__"),
    Gadget("nested-pickle-loads", _nested_pickle, "os.system"),
    Gadget("nested-legacy-torch", _legacy_torch_bytes, "posix.system"),
]  # fmt: skip
"""Gadgets from 19 modules; the last two hide `os.system` in a pickle inside the pickle."""


def reducing(module: str, attribute: str, *arguments: Any) -> object:
    """An object that `torch.save` pickles as the call `module.attribute(*arguments)`."""
    return _Reduces(module, attribute, *arguments)


class TrainConfig:
    """A project's own hyper-parameter class: off the allow-list, trusted only by an operator's exact allow."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


TRUSTED_CLASS = f"{TrainConfig.__module__}.TrainConfig"
