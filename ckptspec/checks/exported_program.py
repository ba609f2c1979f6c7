"""An exported program beside a checkpoint (`<checkpoint>.pt2`, from `torch.export`): judged without
torch — what loading it would run, and whether its weights are the checkpoint's — and, with
`validate --replay`, run on the checkpoint's fixed batch (`ckptspec.replay`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._exceptions import ReaderError
from .._pointer import join_pointer, split_pointer
from .._sidecars import program_path_for
from ._context import Context
from ._registry import Finding, declare

if TYPE_CHECKING:
    from ..formats.torch_export import ExportedProgramFile

__all__ = ["FingerprintReplayMismatch", "ProgramUnsafe", "ProgramWeightsMismatch", "ReplayNotRun", "check", "program_of"]


@declare("CKS336", "fingerprint-replay-mismatch", family="consistency", severity="error")
class FingerprintReplayMismatch:
    """## What it does
    Replays the checkpoint's fixed batch through the program exported beside it (`validate --replay`).
    The program (`<checkpoint>.pt2`, or the Keras model `<prefix>.keras` beside a TensorFlow
    checkpoint) is loaded with the checkpoint's weights, and its outputs are compared with the ones
    recorded at save time, within the spec's fingerprint tolerance.

    ## Why is this bad?
    The weights load, every digest matches, and still the model computes something else: a
    constant that lives in no state dict (a BatchNorm eps, a dropout p, an activation's slope)
    differs between the program and the run that wrote the checkpoint, or the weights are not the
    ones that produced the recorded outputs.

    ## Example
    ```text
    fingerprint: output 'output' differs from the saved one by up to 0.0132 (allowed atol=0, rtol=0)
    ```

    ## How to fix
    Export the program from the model that trained (same constructor arguments) when saving, or
    find which checkpoint the recorded outputs came from.
    """


@declare("CKS337", "replay-not-run", family="consistency", severity="warning")
class ReplayNotRun:
    """## What it does
    Reports a requested replay (`validate --replay`) that could not run. Causes: no exported program
    beside the checkpoint, no fixed batch in it, torch (or, for a TensorFlow checkpoint, TensorFlow)
    not installed, or a checkpoint or program that other findings already judge unsafe or unreadable.

    ## Why is this bad?
    A fingerprint check that did not run must not read as one that passed.

    ## Example
    ```text
    no exported program epoch=3-step=900.ckpt.pt2 beside the checkpoint
    ```

    ## How to fix
    Save with the adapters' `export_program=True` (it needs `fingerprint_batch`), and install the
    `torch` extra (`tensorflow` for TensorFlow checkpoints) where replay runs.
    """


@declare("CKS338", "program-weights-mismatch", family="consistency", severity="error")
class ProgramWeightsMismatch:
    """## What it does
    Checks that the exported program's weights have exactly the names, dtypes and shapes of the
    model tensors the manifest records. For a Keras model beside a TensorFlow checkpoint, the
    manifest's `keras_weights` map names the bundle key of each weight; without Keras the counts of
    each dtype and shape are compared, and replay compares every weight through the map.

    ## Why is this bad?
    Replay loads the checkpoint's weights into the program strictly; a program exported from another
    architecture cannot be a reference for this checkpoint.

    ## Example
    ```text
    the program's weight 'net.2.weight' is float32 [2, 4]; the checkpoint's is float32 [1, 4]
    ```

    ## How to fix
    Export the program from the model that wrote the checkpoint.
    """


@declare("CKS418", "program-unsafe", family="safety", severity="error")
class ProgramUnsafe:
    """## What it does
    Checks that loading the exported program beside a checkpoint would run nothing but its aten
    graph. It must hold no weight or constant stored as a pickle, no operator outside aten and prims,
    no symbolic shapes, no guard code and no script objects; replay never runs a program that does.
    A Keras model beside a TensorFlow checkpoint must name only Keras' own classes in its
    `config.json`, hold no Lambda layer, keep its weights in plain HDF5 (no external links or
    external data), and hold no other member (assets) that Keras would load.

    ## Why is this bad?
    `torch.export.load` unpickles pickled weights and constants with `weights_only=False`, and parses
    symbolic shape expressions with sympy, which evaluates strings: a program file is code unless all
    of that is absent. Loading a `.keras` file imports and builds every class its config names, and a
    Lambda carries Python bytecode.

    ## Example
    ```text
    weight 'net.0.weight' is stored as a pickle, which torch.export.load unpickles with weights_only=False
    ```

    ## How to fix
    Re-export the program with `torch.export.export` and `torch.export.save` from the training code,
    with static shapes; do not load a program whose origin you cannot check.
    """


def program_of(ctx: Context) -> ExportedProgramFile | None:
    """The program beside the checkpoint, or None when there is none; raises `ReaderError` for a damaged one."""
    path = program_path_for(ctx.checkpoint)
    if not path.exists() and not path.is_symlink():
        return None
    from ..formats.torch_export import read_program

    return read_program(path)


def check(ctx: Context) -> Iterator[Finding]:
    """Judge the program beside the checkpoint, if there is one, without torch."""
    try:
        program = program_of(ctx)
    except ReaderError as exc:
        yield ctx.finding(ProgramUnsafe, f"the exported program cannot be read, so it cannot be trusted: {exc}", file=program_path_for(ctx.checkpoint))
        return
    if program is None:
        return
    for refusal in program.refusals:
        yield ctx.finding(ProgramUnsafe, refusal, file=program.path)
    yield from _weights_against_manifest(ctx, program)


def _weights_against_manifest(ctx: Context, program: ExportedProgramFile) -> Iterator[Finding]:
    inventory = ctx.manifest.components.model if ctx.manifest is not None else None
    if inventory is None:
        return
    recorded = {tensor.name: tensor for tensor in inventory.tensors}
    for name in sorted(set(recorded) | set(program.weights)):
        saved, exported = recorded.get(name), program.weights.get(name)
        if exported is None:
            message = f"the checkpoint's model tensor {name!r} is not a weight of the program"
        elif saved is None:
            message = f"the program's weight {name!r} is not among the checkpoint's model tensors"
        elif (saved.dtype, tuple(saved.shape)) == (exported.dtype, exported.shape):
            continue
        else:
            message = (
                f"the program's weight {name!r} is {exported.dtype} {list(exported.shape)}; "
                f"the checkpoint's is {saved.dtype} {list(saved.shape)}"
            )
        yield ctx.finding(ProgramWeightsMismatch, message, file=program.path, pointer=join_pointer([*split_pointer(inventory.at), name]))
