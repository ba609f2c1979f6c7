"""The safety rule every pickle is judged by, wherever it lies: in a checkpoint, a member of a
container, or a Keras archive's config."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ..formats import GlobalRef
from ._context import Context
from ._registry import Finding, declare
from .framework_records import framework_record_findings

__all__ = ["DangerousPickleGlobal", "pickle_dangers"]


@declare("CKS401", "dangerous-pickle-global", family="safety", severity="error")
class DangerousPickleGlobal:
    """## What it does
    Reports every pickle global off ckptspec's allow-list that the operator's spec does not allow by
    its exact name. The allow-list holds inert builders only: tensor and storage rebuilders, dtypes,
    `OrderedDict`, NumPy arrays, Lightning and OmegaConf containers. It counts the globals of pickles hidden inside the pickle (bytes handed to `pickle.loads` or
    `torch.storage._load_from_bytes`) and those named before a pickle that stops reading stopped.

    ## Why is this bad?
    `torch.load(weights_only=False)`, and anything built on it, imports each global's module and
    calls it while unpickling. Off the allow-list that is code nobody reviewed: `os.system`, but
    also `pydoc.pipepager`, `logging.config.listen`, `torch.fx` graph code or a project's own class.
    A deny-list of known gadgets is always one module short, so anything off the list is an error.

    ## Example
    A `.ckpt` whose `data.pkl` holds `GLOBAL 'posix system'` + `REDUCE` with `('curl … | sh',)`,
    or a hyper-parameter object `myproject.config.TrainConfig`.

    ## How to fix
    Do not load the file. If it comes from your own training code and names your own classes, save
    plain types instead, or have the operator's spec (`--spec`) trust each class by its exact name:
    `pickle: {allow: ["myproject.config.TrainConfig"]}`. A manifest's own spec cannot allow globals.
    """


def pickle_dangers(ctx: Context, globals_named: Iterable[GlobalRef], file: Path, naming: str = "pickle") -> Iterator[Finding]:
    """A CKS401 finding for each dangerous global in `globals_named` that the spec of `ctx` does not
    allow by its exact name (the judging spec is always the operator's; see `_validate`); `naming`
    is what names them (a pickle, or a Keras archive's config.json)."""
    allowed = frozenset(ctx.spec.pickle.allow) if ctx.spec is not None else frozenset()
    files = ctx.view.global_files if ctx.view is not None else {}
    records = [used for used in globals_named if used.safety == "framework-record" and used.qualname not in allowed]
    yield from framework_record_findings(ctx, records, {used.qualname: files.get(used.qualname, file) for used in records}, naming)
    for used in globals_named:
        if used.safety == "dangerous" and used.qualname not in allowed:
            named_in = files.get(used.qualname, file)
            where = f"{_relative(named_in, file)}: " if named_in != file else ""
            yield ctx.finding(
                DangerousPickleGlobal,
                f"{where}{naming} names {used.qualname} ({used.count}×), which is not on the allow-list: loading it runs that code"
                f" (to trust it, list it under pickle.allow in the spec passed with --spec)",
                file=named_in,
            )


def _relative(path: Path, checkpoint: Path) -> str:
    """`path` as messages name it: below the checkpoint's directory where it lies there."""
    try:
        return str(path.relative_to(checkpoint))
    except ValueError:
        return str(path)
