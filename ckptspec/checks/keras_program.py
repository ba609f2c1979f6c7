"""A Keras model exported beside a TensorFlow checkpoint (`<prefix>.keras`): judged without Keras —
what loading it would build, and whether its weights can be the checkpoint's — and, with
`validate --replay`, run on the checkpoint's fixed batch (`ckptspec.replay`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._exceptions import ReaderError
from .._sidecars import keras_program_path_for
from ._context import Context
from ._registry import Finding
from .exported_program import ProgramUnsafe, ProgramWeightsMismatch

if TYPE_CHECKING:
    from .._models import Manifest
    from ..formats.keras_export import ExportedKeras

__all__ = ["check", "weight_problems"]


def check(ctx: Context) -> Iterator[Finding]:
    """Judge the `.keras` beside a TensorFlow checkpoint, if there is one, without Keras."""
    if ctx.manifest is None or ctx.manifest.format != "tf-bundle":
        return
    path = keras_program_path_for(ctx.checkpoint)
    if not path.exists() and not path.is_symlink():
        return
    from ..formats.keras_export import read_keras_program

    try:
        program = read_keras_program(path)
    except ReaderError as exc:
        yield ctx.finding(ProgramUnsafe, f"the exported Keras model cannot be read, so it cannot be trusted: {exc}", file=path)
        return
    for refusal in program.refusals:
        yield ctx.finding(ProgramUnsafe, refusal, file=path)
    for problem in weight_problems(ctx.manifest, program):
        yield ctx.finding(ProgramWeightsMismatch, problem, file=path)


def weight_problems(manifest: Manifest, program: ExportedKeras) -> list[str]:
    """Whether the archive's weights can be the checkpoint's model tensors the manifest maps them to:
    the same count of each dtype and shape, every mapped key one of the model's variables."""
    inventory = manifest.components.model
    mapped = inventory.keras_weights if inventory is not None else None
    if inventory is None or mapped is None:
        return ["the manifest records no map from the exported model's weights to the checkpoint's (keras_weights)"]
    tensors = {tensor.name: tensor for tensor in inventory.tensors if tensor.role == "variable"}
    unknown = sorted(key for key in mapped.values() if key not in tensors)
    problems = [f"keras_weights maps to {key!r}, which is not one of the model's variables in the checkpoint" for key in unknown]
    expected = Counter((tensors[key].dtype, tuple(tensors[key].shape)) for key in mapped.values() if key in tensors)
    for (dtype, shape), count in sorted((expected - program.weights).items()):
        problems.append(f"the checkpoint has {count} more {dtype} {list(shape)} weight(s) than the exported model")
    for (dtype, shape), count in sorted((program.weights - expected).items()):
        problems.append(f"the exported model has {count} {dtype} {list(shape)} weight(s) the checkpoint does not map")
    return problems
