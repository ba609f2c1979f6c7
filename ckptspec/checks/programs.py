"""Programs inside checkpoints: a TorchScript archive's `code/` is code, and must stay the code recorded.

Its rules belong to two families: that the program exists is a safety matter (it runs when the
module is loaded and called), that it changed is an integrity one. `safety.check` and
`integrity.check` call the generators here.
"""

from __future__ import annotations

from collections.abc import Iterator

from ._context import Context
from ._registry import Finding, declare

__all__ = ["ProgramChanged", "ProgramNotRecorded", "TorchScriptProgram", "program_changes", "program_present"]

_SHOWN_FILES = 3


@declare("CKS415", "torchscript-program", family="safety", severity="warning")
class TorchScriptProgram:
    """## What it does
    Reports that the checkpoint is a TorchScript archive, whose `code/` folder holds a program,
    and lists its source files. ckptspec reads the archive's tensors and pickles without running
    that program; the finding is a warning whatever the pickles hold.

    ## Why is this bad?
    `torch.jit.load` compiles the program, runs a class's `__setstate__` while restoring it, and
    runs `forward` whenever the model is called. TorchScript cannot import Python modules, but it
    can call every operator torch registers, file and process operators of loaded extensions
    included. Accepting the file means trusting its code, not only its weights.

    ## Example
    `model.pt` from `torch.jit.save(torch.jit.script(model))`: `code/__torch__.py` and one file per
    scripted submodule.

    ## How to fix
    Review the code (`unzip -p model.pt '*/code/*'`), or ship weights only (`state_dict()` in a
    safetensors or `torch.save` file) and build the module from reviewed code.
    """


@declare("CKS223", "program-changed", family="integrity", severity="error")
class ProgramChanged:
    """## What it does
    Compares the SHA-256 of a TorchScript archive's program (every `code/` record by name and
    content) and its list of files with what the manifest records under `components.program`.

    ## Why is this bad?
    The weights may be intact while the code that uses them was replaced: a different `forward`
    gives different outputs, or does something else entirely, with every tensor checksum passing.

    ## Example
    `components.program.sha256: 3f1c…` recorded; the archive's code now hashes to `9ab0…` because
    `code/__torch__.py` was edited.

    ## How to fix
    Restore the archive from a trusted copy, or, when the new program is intended, review it and
    write the manifest again with `ckptspec manifest --force`.
    """


@declare("CKS224", "program-not-recorded", family="integrity", severity="warning")
class ProgramNotRecorded:
    """## What it does
    Reports a TorchScript archive whose manifest has no `components.program`: its code is not
    covered by the manifest.

    ## Why is this bad?
    Tensor checksums protect the weights only; the program could change without any finding.

    ## Example
    A manifest written for a `torch.save` file, kept when the file was replaced by a TorchScript
    archive of the same weights.

    ## How to fix
    Write the manifest again with `ckptspec manifest --force`, which records the program.
    """


def program_present(ctx: Context) -> Iterator[Finding]:
    if ctx.view is None or ctx.view.program is None:
        return
    files = ctx.view.program.files
    shown = ", ".join(files[:_SHOWN_FILES]) + (f" and {len(files) - _SHOWN_FILES} more" if len(files) > _SHOWN_FILES else "")
    yield ctx.finding(
        TorchScriptProgram,
        f"TorchScript program of {len(files)} code/ files ({shown}); torch.jit.load compiles and runs it",
        file=ctx.view.path,
    )


def program_changes(ctx: Context) -> Iterator[Finding]:
    if ctx.view is None or ctx.view.program is None or ctx.manifest is None:
        return
    recorded = ctx.manifest.components.program
    if recorded is None:
        yield ctx.finding(ProgramNotRecorded, "the manifest records no program for this TorchScript archive", file=ctx.manifest_path, path=("components",))
        return
    program = ctx.view.program
    if program.files != recorded.files:
        added, removed = sorted(set(program.files) - set(recorded.files)), sorted(set(recorded.files) - set(program.files))
        yield ctx.finding(
            ProgramChanged, f"code files differ: added {added or 'none'}, removed {removed or 'none'}",
            file=ctx.view.path, path=("components", "program", "files"),
        )  # fmt: skip
    elif program.sha256 != recorded.sha256:
        yield ctx.finding(
            ProgramChanged, f"program sha256 {program.sha256[:12]}… in the archive, {recorded.sha256[:12]}… recorded",
            file=ctx.view.path, path=("components", "program", "sha256"),
        )  # fmt: skip
