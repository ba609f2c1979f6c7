"""The unpickler's stack, followed opcode by opcode without building any object.

The opcode walk of `_pickle_scan` reads what the bytes name; two questions need the stack as
well. How deep do tuples nest? The C unpickler hashes every dict key and set item, recursively for a
tuple and without a bound, so a tuple nested a hundred thousand levels deep crashes the process that
reads it. And how far would the unpickler get in bytes that carry no PROTO opcode? Protocols 0 and
1 have no signature: prose that opens with an opcode's letter (`c`, `(`, `S`) is told from a pickle
by whether the unpickler would call anything on a stack it accepts.
"""

from __future__ import annotations

import pickletools

from .._dataclass import dataclass

__all__ = ["TUPLE_NESTING_LIMIT", "StackWalk", "walk_stack"]

TUPLE_NESTING_LIMIT = 10_000
"""Tuples nested deeper than this are refused; no checkpoint nests tuples more than a few levels, and
the C unpickler's recursive hash of a dict key crashes at about 150 000 levels on an 8 MiB stack."""

_MARK, _TUPLES = -1, frozenset(b"t\x85\x86\x87)")
_CALLS = frozenset(b"Rbio\x81\x92")  # REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX
_GLOBALS = frozenset(b"ci\x93")
_GETS = {ord("g"): "text", ord("h"): "byte", ord("j"): "long"}
_PUTS = {ord("p"): "text", ord("q"): "byte", ord("r"): "long"}


def _effects() -> dict[int, tuple[int, bool, int, int]]:
    """Opcode byte → (values it pops above a mark or the fence, whether it pops a mark, values it
    needs below that mark, values it pushes), from pickletools' own stack descriptions."""
    effects = {}
    for op in pickletools.opcodes:
        before, after = op.stack_before, op.stack_after
        if pickletools.markobject in before:
            at = before.index(pickletools.markobject)
            above = [item for item in before[at + 1 :] if item is not pickletools.stackslice]
            effects[ord(op.code)] = (len(above), True, at, len(after))
        else:
            effects[ord(op.code)] = (len(before), False, 0, len(after))
    return effects


_EFFECTS = _effects()
_ARGUMENTS = {ord(op.code): op.arg for op in pickletools.opcodes}


@dataclass
class StackWalk:
    """How far the unpickler would read, and what it would do on the way."""

    end: int
    """Offset just past STOP, or of the first opcode the unpickler would refuse."""
    complete: bool
    """Whether it reached a STOP with one value on the stack."""
    calls: int = 0
    """Opcodes that call what the pickle names (REDUCE, BUILD, INST, OBJ, NEWOBJ) on a stack it accepts."""
    globals_named: int = 0
    deepest_tuple: int = 0


def walk_stack(data: bytes, start: int = 0, *, tuple_limit: int | None = None) -> StackWalk:
    """Follow the stack of the pickle at `data[start:]` until its STOP or the first opcode the C
    unpickler would refuse (a stack too shallow, no mark where one is needed, a memo index never
    stored, a text argument that does not parse); with `tuple_limit`, also until a tuple nests
    deeper than that. Types are not followed (APPEND to an int reads on), so the walk goes at least
    as far as the unpickler. Each stack entry is the tuple depth of its value (-1 for a mark)."""
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    walk = StackWalk(start, False)
    position, size = start, len(data)
    while position < size:
        code = data[position]
        argument = _ARGUMENTS.get(code, _UNKNOWN)
        if argument is _UNKNOWN:
            break
        end = _argument_end(data, position, argument)
        if end is None:
            break
        floor = marks[-1] + 1 if marks else 0  # the first value above the last mark
        pops, to_mark, below, pushes = _EFFECTS[code]
        if code == ord("("):
            marks.append(len(stack))
            stack.append(_MARK)
        elif code == ord("0"):  # POP: a value above the mark, else the mark itself
            if len(stack) > floor:
                stack.pop()
            elif marks:
                del stack[marks.pop() :]
            else:
                break
        elif code == ord("2"):  # DUP
            if len(stack) <= floor:
                break
            stack.append(stack[-1])
        elif code in _PUTS or code == 0x94:
            if len(stack) <= floor:
                break
            index = len(memo) if code == 0x94 else _memo_index(data, position, end, _PUTS[code])
            if index is None:
                break
            memo[index] = stack[-1]
        elif code in _GETS:
            index = _memo_index(data, position, end, _GETS[code])
            if index not in memo:
                break
            stack.append(memo[index])
        elif code == ord("."):
            walk.complete = len(stack) > floor
            walk.end = end
            return walk
        elif to_mark:
            if not marks or len(stack) - floor < pops:
                break
            items = stack[floor:]
            del stack[floor - 1 :]
            marks.pop()
            if len(stack) - (marks[-1] + 1 if marks else 0) < below:
                break
            del stack[len(stack) - below :]
            stack.extend(_pushed(code, items, pushes))
        else:
            if len(stack) - floor < pops:
                break
            items = stack[len(stack) - pops :] if pops else []
            del stack[len(stack) - pops :]
            stack.extend(_pushed(code, items, pushes))
        if code in _CALLS:
            walk.calls += 1
        if code in _GLOBALS:
            walk.globals_named += 1
        if code in _TUPLES and stack and stack[-1] > walk.deepest_tuple:
            walk.deepest_tuple = stack[-1]
            if tuple_limit is not None and walk.deepest_tuple > tuple_limit:
                walk.end = position
                return walk
        position = end
    walk.end = position
    return walk


_UNKNOWN = object()


def _pushed(code: int, items: list[int], count: int) -> list[int]:
    if code in _TUPLES:
        return [1 + max(items, default=0)]
    if code in (ord("a"), ord("s"), 0x81, ord("b")) and items:
        return [items[0]] * count  # the container or object below keeps its depth
    return [0] * count


def _argument_end(data: bytes, position: int, argument: pickletools.ArgumentDescriptor | None) -> int | None:
    """Where the opcode at `position` ends, or None where its argument is cut short or, for the
    text opcodes, would not parse (an unquoted STRING, an INT that is no number)."""
    begin = position + 1
    if argument is None:
        return begin
    if argument.n >= 0:
        return begin + argument.n if begin + argument.n <= len(data) else None
    if argument.n == pickletools.UP_TO_NEWLINE:
        end = data.find(b"\n", begin)
        if end < 0:
            return None
        if argument.name == "stringnl_noescape_pair":
            second = data.find(b"\n", end + 1)
            return None if second < 0 or not _names(data[begin:end]) or not _names(data[end + 1 : second]) else second + 1
        return end + 1 if _text_parses(argument.name, data[begin:end]) else None
    width = {pickletools.TAKEN_FROM_ARGUMENT1: 1, pickletools.TAKEN_FROM_ARGUMENT4: 4,
             pickletools.TAKEN_FROM_ARGUMENT4U: 4, pickletools.TAKEN_FROM_ARGUMENT8U: 8}[argument.n]  # fmt: skip
    length = int.from_bytes(data[begin : begin + width], "little", signed=argument.n == pickletools.TAKEN_FROM_ARGUMENT4)
    end = begin + width + length
    return end if length >= 0 and end <= len(data) else None


def _names(text: bytes) -> bool:
    """Whether a GLOBAL or INST line is a name the unpickler could import: a dotted identifier."""
    try:
        return all(part.isidentifier() for part in text.decode("utf-8").split("."))
    except UnicodeDecodeError:
        return False


def _text_parses(kind: str, text: bytes) -> bool:
    try:
        if kind == "stringnl":
            return len(text) >= 2 and text[:1] in b"'\"" and text[-1:] == text[:1]
        if kind == "decimalnl_short":
            int(text)
        elif kind == "decimalnl_long":
            int(text[:-1] if text.endswith(b"L") else text)
        elif kind == "floatnl":
            float(text)
        elif kind == "unicodestringnl":
            text.decode("raw-unicode-escape")
        elif kind == "stringnl_noescape":
            text.decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _memo_index(data: bytes, position: int, end: int, form: str) -> int | None:
    if form == "text":
        digits = data[position + 1 : end - 1]
        return int(digits) if digits.isdigit() else None
    return int.from_bytes(data[position + 1 : end], "little")
