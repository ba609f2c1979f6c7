"""The globals that Hugging Face training state really pickles, judged one by one.

A Trainer `checkpoint-N/` and an Accelerate `save_state` directory hold two kinds of pickled globals
beyond tensors and containers:

- Values a resume needs (the NumPy generator state in `rng_state*.pth` and `random_states_*.pkl`):
  those whose construction runs nothing of the file's are on the built-in allow-list
  (`ALLOWED_VALUES`, joined to `_pickle_policy.ALLOW_LIST`), each with the reason beside it.
- Framework records (`training_args.bin`: the pickled `TrainingArguments`, its enums, the Accelerate
  process state it holds): no resume reads them, and `torch.load(weights_only=True)` refuses them.
  They are judged `framework-record` (`RECORDS`), neither allowed nor dangerous, as long as the
  pickle builds them the way the framework writes them: a class made by `__new__` alone and then
  given its attributes, an enum looked up by one value. A record built otherwise is named as a
  global of its own (`misuse_name`), off every list and so dangerous; so is every other global of
  these modules: no module is trusted, no pattern used.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

__all__ = ["ALLOWED_VALUES", "RECORDS", "misuse_name", "record_description", "record_stub_class"]

ALLOWED_VALUES: frozenset[tuple[str, str]] = frozenset({
    # NumPy 2's class of the uint32 dtype, which a pickle names when it holds the dtype's type (the
    # `weights_only` loader asks for it beside `numpy.dtype` when it reads a generator state). Called,
    # it returns the uint32 dtype and reads nothing of its arguments: building it runs no code of the file's.
    ("numpy.dtypes", "UInt32DType"),
})  # fmt: skip
"""Joined to the built-in allow-list."""

RecordKind = Literal["object", "enum"]

RECORDS: dict[tuple[str, str], tuple[RecordKind, str]] = {
    # TrainingArguments is a dataclass without __new__, __setstate__ or __setattr__: made by
    # `object.__new__` and given its fields as a dict (BUILD), none of its code runs. Called with
    # arguments instead, its __post_init__ would read the files they name and set up processes.
    ("transformers.training_args", "TrainingArguments"): ("object", "the Trainer's arguments"),
    # A dataclass of the same kind: the `accelerator_config` field of the arguments.
    ("transformers.trainer_pt_utils", "AcceleratorConfig"): ("object", "the Trainer's Accelerate settings"),
    # Accelerate's process state (the arguments' `distributed_state`): without __new__ or
    # __setstate__, built as TrainingArguments is, so its __init__ (which starts process groups)
    # never runs.
    ("accelerate.state", "PartialState"): ("object", "Accelerate's process state"),
    # `str` enums, rebuilt by looking their value up among the members (an unknown value raises);
    # none defines a __new__ or _missing_ that does more.
    ("transformers.trainer_utils", "IntervalStrategy"): ("enum", "a Trainer setting"),
    ("transformers.trainer_utils", "SaveStrategy"): ("enum", "a Trainer setting"),
    ("transformers.trainer_utils", "HubStrategy"): ("enum", "a Trainer setting"),
    ("transformers.trainer_utils", "SchedulerType"): ("enum", "a Trainer setting"),
    ("transformers.trainer_utils", "FSDPOption"): ("enum", "a Trainer setting"),
    ("transformers.training_args", "OptimizerNames"): ("enum", "a Trainer setting"),
    ("transformers.debug_utils", "DebugOption"): ("enum", "a Trainer setting"),
    ("accelerate.utils.dataclasses", "DistributedType"): ("enum", "Accelerate's kind of process group"),
}  # fmt: skip
"""`(module, name)` → how the framework builds it, and what it is."""

_ENUM_VALUES = (str, int)


def record_description(module: str, name: str) -> str:
    """What the framework record `module.name` is, for messages."""
    return RECORDS[(module, name)][1]


def misuse_name(name: str, kind: RecordKind) -> str:
    """The name a record built otherwise than its framework builds it is counted under."""
    return f"{name} (called)" if kind == "object" else f"{name} (called with other than one value)"


def record_stub_class(base: type, module: str, name: str, misused: Counter[tuple[str, str]]) -> Any:
    """The restricted unpickler's stand-in for the record `module.name`: its stub class `base`,
    which also counts, in `misused`, every instance built otherwise than the framework builds it (so
    that the global `misuse_name` names is judged dangerous)."""
    kind = RECORDS[(module, name)][0]

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if _misused(kind, args, kwargs):
            misused[(module, misuse_name(name, kind))] += 1
        return base.__new__(cls, *args, **kwargs)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Only a call of the class (REDUCE) runs __init__, never NEWOBJ: the constructor itself.
        if kind == "object":
            misused[(module, misuse_name(name, kind))] += 1

    return type(base.__name__, (base,), {"__new__": __new__, "__init__": __init__, "__module__": base.__module__})


def _misused(kind: RecordKind, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if kind == "object":
        return bool(args or kwargs)  # NEWOBJ with an empty tuple is `cls.__new__(cls)` alone
    return bool(kwargs) or len(args) != 1 or not isinstance(args[0], _ENUM_VALUES)
