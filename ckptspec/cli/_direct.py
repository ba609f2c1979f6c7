"""`inspect`, `validate` and `audit` without click.

Importing click and what it imports (`inspect`, `uuid`, `datetime`, `gettext`, `threading`) takes
longer than judging a small checkpoint, and a scanner at intake starts once per upload. The click
commands stay the one declaration of every command: their parameters are read into `_direct_plan`
(`python -m ckptspec.cli._plan_from_click --write`, checked by a test), and a command line that plan reads
the way click would runs the command's function directly. Anything else goes to click, which then
says what it always says: help, a misspelt option, a value it refuses, an option with a callback, a
shell completion, a usage error the command raises before writing anything.
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path
from typing import Any

from .._storage import location
from ._collector import resume
from ._console import UsageProblem, echo, reported, writes_as_is

__all__ = ["BODIES", "parsed", "run_directly"]

BODIES = {
    "inspect": ("_inspecting", "run_inspect"),
    "validate": ("_enforcing", "run_validate"),
    "audit": ("_enforcing", "run_audit"),
}
"""The commands run without click, and the function each click command calls with its parameters."""

_COMPLETION = "_CKPTSPEC_COMPLETE"
"""What click's shell completion sets for the program `ckptspec`."""

_CLICK = object()
"""What a value converts to when click would refuse it."""

Plan = dict[str, Any]


def run_directly(args: list[str]) -> int | None:
    """The exit code of the command `args` name, run without click; None when click must run it."""
    if not args or args[0] not in BODIES or os.environ.get(_COMPLETION) or not (writes_as_is(sys.stdout) and writes_as_is(sys.stderr)):
        return None
    from ._direct_plan import PLAN

    options = parsed(PLAN[args[0]], args[1:])
    if options is None:
        return None
    module, function = BODIES[args[0]]
    body = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    resume()
    try:
        return body(**options)
    except UsageProblem:
        return None
    except (EOFError, KeyboardInterrupt):
        # What click's standalone mode writes for an interrupted command.
        echo("", err=True)
        echo("Aborted!", err=True)
        return 1
    except Exception as error:
        return reported(error)


def parsed(plan: Plan, tokens: list[str]) -> dict[str, Any] | None:
    """The parameters click would pass for `tokens`, or None where that takes click to decide."""
    options = plan["options"]
    values: dict[str, Any] = {}
    positional: list[str] = []
    given = iter(tokens)
    for token in given:
        if not token.startswith("-"):
            positional.append(token)
            continue
        name, equals, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name not in options:
            return None
        dest, kind, multiple = options[name]
        if dest in values and not multiple or kind == ("click",):
            return None
        if kind == ("flag",):
            if equals:
                return None
            values[dest] = True
            continue
        value = inline if equals else next(given, None)
        if value is None or (not equals and value.startswith("-")):
            return None
        converted = _converted(kind, value)
        if converted is _CLICK:
            return None
        values[dest] = (*values.get(dest, ()), converted) if multiple else converted
    arguments = _arguments(plan["arguments"], positional)
    return None if arguments is None else {**plan["defaults"], **values, **arguments}


def _arguments(declared: tuple[tuple[str, tuple[Any, ...], bool], ...], positional: list[str]) -> dict[str, Any] | None:
    if len(declared) == 1 and declared[0][2]:
        dest, kind, _ = declared[0]
        converted = tuple(_converted(kind, value) for value in positional)
        return None if not converted or any(value is _CLICK for value in converted) else {dest: converted}
    if len(positional) != len(declared):
        return None
    arguments = {dest: _converted(kind, value) for (dest, kind, _), value in zip(declared, positional)}
    return None if any(value is _CLICK for value in arguments.values()) else arguments


def _converted(kind: tuple[Any, ...], value: str) -> Any:
    """`value` as click's parameter type `kind` converts it, or `_CLICK` where click would refuse it
    or fail on it (a NUL in a path): click then says what it says."""
    try:
        return _conversion(kind, value)
    except Exception:  # noqa: BLE001 - whatever it is, click meets it again and reports it
        return _CLICK


def _conversion(kind: tuple[Any, ...], value: str) -> Any:
    match kind:
        case ("location",):
            return location(value)
        case ("path", file_okay, dir_okay, readable, writable, executable):
            try:
                mode = os.stat(value).st_mode
            except OSError:
                return Path(value)
            refused = (
                (not file_okay and stat.S_ISREG(mode))
                or (not dir_okay and stat.S_ISDIR(mode))
                or (readable and not os.access(value, os.R_OK))
                or (writable and not os.access(value, os.W_OK))
                or (executable and not os.access(value, os.X_OK))
            )
            return _CLICK if refused else Path(value)
        case ("choice", *choices):
            return value if value in choices else _CLICK
        case ("int", minimum):
            if not (value.isascii() and value.isdigit()) or (minimum is not None and int(value) < minimum):
                return _CLICK
            return int(value)
    raise AssertionError(f"no conversion for {kind!r}")
