"""Replay a checkpoint's fixed batch through the program exported beside it — no training code needed.

    from ckptspec.replay import replay
    findings = replay("runs/epoch=3-step=900.ckpt")      # [] when the outputs are reproduced

What runs: the aten graph of `<checkpoint>.pt2`, after `ckptspec.checks.exported_program` found nothing in it
that loading would run besides (no pickled weights or constants, no symbolic shapes, only aten and
prims operators). Torch is handed a copy of the archive that holds only those checked records — never
the sample-input pickle. The checkpoint's weights come from `torch.load(weights_only=True)`, loaded
into the program strictly (every name, shape and dtype), and the fixed batch and its recorded outputs
come from the checkpoint, located by its manifest. Needs the `torch` extra.

A TensorFlow checkpoint is replayed through the Keras model exported beside it instead
(`ckptspec._replay_keras`, needs the `tensorflow` extra).
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._documents import load_manifest
from ._sidecars import manifest_path_for
from ._exceptions import CkptspecError
from ._models import Manifest, Spec
from ._result import Result
from ._pointer import split_pointer
from .checks._context import Context
from .checks._registry import Finding
from .checks.exported_program import FingerprintReplayMismatch, ProgramWeightsMismatch, ReplayNotRun
from .formats.torch_export import program_path_for, read_program

__all__ = ["replay", "replay_check"]


def replay_check(ctx: Context, result: Result) -> list[Finding]:
    """`replay` as a check `validate` and `audit` run (`extra_checks`): only for a checkpoint with
    a manifest that nothing judged unsafe to load."""
    unsafe = [finding for finding in result.findings if finding.family == "safety" and finding.severity == "error"]
    if unsafe or ctx.manifest is None:
        reason = "the checkpoint is judged unsafe to load" if unsafe else "the checkpoint has no manifest"
        return [ReplayNotRun.finding(f"replay not run: {reason}", checkpoint=result.checkpoint)]
    return replay(ctx.checkpoint, spec=ctx.spec, manifest=ctx.manifest)


def replay(checkpoint: str | Path, *, spec: Spec | None = None, manifest: Manifest | None = None) -> list[Finding]:
    """Run the fixed batch through the exported program with the checkpoint's weights; one finding per
    output that differs from the recorded one (within the spec's fingerprint tolerance), or one saying
    why replay could not run."""
    checkpoint = Path(checkpoint)
    try:
        manifest = manifest or load_manifest(manifest_path_for(checkpoint))
        if manifest.format == "tf-bundle":
            from ._replay_keras import replay_keras

            return replay_keras(checkpoint, manifest, spec)
        return _replay(checkpoint, manifest, spec)
    except _NotRun as reason:
        return [ReplayNotRun.finding(str(reason), checkpoint=str(checkpoint), file=str(program_path_for(checkpoint)))]
    except CkptspecError as exc:
        return [ReplayNotRun.finding(f"replay could not run: {exc}", checkpoint=str(checkpoint), file=str(checkpoint))]


class _NotRun(Exception):
    pass


def _replay(checkpoint: Path, manifest: Manifest, spec: Spec | None) -> list[Finding]:
    try:
        import torch
    except ImportError:
        raise _NotRun("replay needs torch (install ckptspec[torch])") from None
    components = manifest.components
    if manifest.format not in ("torch", "lightning") or components.model is None or components.fingerprint is None:
        raise _NotRun("the manifest records no model tensors and fixed batch of a torch checkpoint to replay")
    program_path = program_path_for(checkpoint)
    if not program_path.is_file():
        raise _NotRun(f"no exported program {program_path.name} beside the checkpoint")
    program = read_program(program_path)
    if program.refusals:
        raise _NotRun(f"{program_path.name} is not run: {'; '.join(program.refusals)}")
    state = _load_checkpoint(torch, checkpoint)
    weights = _at(state, components.model.at, checkpoint, "model tensors")
    fingerprint = _at(state, components.fingerprint.at, checkpoint, "fixed batch")
    module = _load_program(torch, program)
    name = str(checkpoint)
    try:
        module.load_state_dict(dict(weights), strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        return [ProgramWeightsMismatch.finding(f"the checkpoint's weights do not load into the program: {exc}", checkpoint=name, file=str(program_path))]
    rule = spec.components.fingerprint if spec is not None else components.fingerprint
    return [
        FingerprintReplayMismatch.finding(f"fingerprint: {line}", checkpoint=name, file=str(program_path), pointer=components.fingerprint.at)
        for line in _differences(torch, module, fingerprint, rule.atol, rule.rtol)
    ]


def _load_checkpoint(torch: Any, checkpoint: Path) -> Any:
    try:
        return torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - torch's safe loader refuses in many ways
        raise _NotRun(f"torch.load(weights_only=True) refuses the checkpoint: {type(exc).__name__}: {exc}") from None


def _at(state: Any, pointer: str, checkpoint: Path, what: str) -> Any:
    value = state
    for part in split_pointer(pointer):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise _NotRun(f"the checkpoint has no {what} at {pointer!r}, where the manifest says they are")
    return value


def _load_program(torch: Any, program: Any) -> Any:
    with tempfile.TemporaryDirectory(prefix="ckptspec-replay-") as directory:
        checked = Path(directory) / "program.pt2"
        with zipfile.ZipFile(checked, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, data in program.replay_records():
                archive.writestr(name, data)
        try:
            return torch.export.load(checked).module()
        except Exception as exc:  # noqa: BLE001 - a program torch cannot deserialize is reported, not raised
            raise _NotRun(f"torch.export cannot load the program: {type(exc).__name__}: {exc}") from None


def _differences(torch: Any, module: Any, fingerprint: Any, atol: float, rtol: float) -> list[str]:
    from .adapters._torch_replay import fingerprint_differences, flatten_outputs

    try:
        args, kwargs, saved = list(fingerprint["args"]), dict(fingerprint["kwargs"]), dict(fingerprint["outputs"])
    except (KeyError, TypeError):
        raise _NotRun("the fixed batch in the checkpoint has no args, kwargs and outputs") from None
    try:
        with torch.no_grad():
            result = module(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the program's own error, reported as the replay's outcome
        raise _NotRun(f"the program fails on the fixed batch: {type(exc).__name__}: {exc}") from None
    replayed: dict[str, Any] = {}
    flatten_outputs("output", result, replayed)
    return fingerprint_differences(saved, replayed, atol=atol, rtol=rtol)
