"""Safety: a training framework's own records, recognised for what they are (see `formats._framework_records`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from ..formats import GlobalRef
from .._framework_records import record_description
from ._context import Context
from ._registry import Finding, declare

__all__ = ["FrameworkRecord", "framework_record_findings"]


@declare("CKS416", "framework-record", family="safety", severity="info")
class FrameworkRecord:
    """## What it does
    Reports a pickle global that is a training framework's own record, judged one by one (the
    Trainer's `TrainingArguments` in `training_args.bin`).

    Those records are the arguments, the enums and dataclasses they hold, and the Accelerate
    process state among them. It is reported only where the
    pickle builds the record as the framework writes it: a class made by `__new__` alone and given
    its attributes, an enum looked up by one value. A record built otherwise (its constructor
    called with the file's values) is reported as CKS401, and so is every other global of the same
    modules.

    ## Why is this bad?
    It is not: no resume reads these files (the Trainer never loads `training_args.bin`), and
    `torch.load(weights_only=True)` refuses them, so they are not loadable the safe way either.
    Calling them dangerous would teach operators to wave CKS401 through; allowing them would hide
    that a `weights_only` loader cannot read the file. The finding says what the file is and fails
    nothing.

    ## Example
    `checkpoint-500/training_args.bin`: a `torch.save(args)` whose pickle names
    `transformers.training_args.TrainingArguments`, `transformers.trainer_utils.IntervalStrategy`,
    `accelerate.state.PartialState`, ...

    ## How to fix
    Nothing is needed. To keep the arguments in a form any tool reads, save `args.to_json_string()`
    beside the checkpoint; to load the record itself, use `weights_only=False` only on a file you trust.
    """


def framework_record_findings(ctx: Context, records: list[GlobalRef], files: Mapping[str, Path], naming: str = "pickle") -> Iterator[Finding]:
    """One CKS416 finding per file for the framework records among its globals (`files`: the file
    naming each record)."""
    by_file: dict[Path, list[GlobalRef]] = {}
    for used in records:
        by_file.setdefault(files[used.qualname], []).append(used)
    for file, named in by_file.items():
        listed = ", ".join(f"{used.qualname} ({record_description(used.module, used.name)})" for used in named)
        yield ctx.finding(
            FrameworkRecord,
            f"{naming} names framework records, not needed to resume and not loadable with weights_only, each built as its "
            f"framework writes it (which runs none of its code): {listed}",
            file=file,
        )
