"""Judge checkpoints against their manifests and a spec: `validate` one, `audit` many in parallel.

    result = validate("runs/epoch=3-step=900.ckpt")
    for finding in result.findings:
        print(finding.code, finding.severity, finding.location, finding.message)
    raise SystemExit(result.exit_code)

Reading never runs pickle and never imports torch or TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ._documents import load_manifest, load_spec, manifest_path_for, spec_digest
from ._exceptions import CkptspecError, DocumentError, ReaderError
from ._exit import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE
from ._models import Manifest, Spec
from .checks import FAMILY_CHECKS, Context, Family, Finding, inputs
from .checks._view import CheckpointView, open_view
from .checks.integrity import IndexMissing
from .formats.detect import ZIP_MAGIC, DetectedCheckpoint, detect

__all__ = ["EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_UNUSABLE", "Report", "Result", "audit", "discover", "validate"]

_TORCH_SUFFIXES = (".ckpt", ".pt", ".pth")
_TF_DATA_MARK = ".data-"


@dataclass
class Result:
    """Everything one validation found about one checkpoint."""

    checkpoint: str
    format: str | None
    manifest: str | None
    spec: str | None
    """The name of the spec it was judged against."""
    findings: list[Finding] = field(default_factory=list)
    families: tuple[Family, ...] = ()
    """The families whose checks ran (a crash inside one is a finding of its own)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def passed(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.passed else EXIT_FINDINGS

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def to_json(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "format": self.format,
            "manifest": self.manifest,
            "spec": self.spec,
            "passed": self.passed,
            "counts": {severity: self.count(severity) for severity in ("error", "warning", "info")},
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass
class Report:
    """The results of one run over one or more checkpoints, in discovery order."""

    results: list[Result]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.passed else EXIT_FINDINGS

    @property
    def findings(self) -> list[Finding]:
        return [finding for result in self.results for finding in result.findings]


def validate(path: str | Path, spec: Spec | str | Path | None = None) -> Result:
    """Validate one checkpoint (file, TensorFlow prefix, or a directory holding one).

    The spec defaults to the one embedded in the checkpoint's manifest. Raises `ReaderError` when
    nothing at `path` is a checkpoint, and `DocumentError` when the given spec cannot be read;
    everything wrong with the checkpoint itself is a finding.
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    found = _locate(Path(path))
    result = Result(checkpoint=str(found.path), format=None, manifest=None, spec=None)
    manifest_path = manifest_path_for(found.path)
    manifest = _load_manifest(manifest_path, result)
    ctx_spec = _choose_spec(given_spec, manifest, manifest_path, result)
    view = _open_view(found, result)
    try:
        ctx = Context(found.path, manifest_path if manifest is not None else None, manifest, ctx_spec, view)
        _match_manifest(ctx, result)
        _run_families(ctx, result)
    finally:
        if view is not None:
            view.close()
    return result


def _locate(path: Path) -> DetectedCheckpoint:
    if path.is_dir() and len(inside := discover([path])) == 1:
        path = inside[0]
    try:
        return detect(path)
    except ReaderError:
        # Data shards without their index are a TensorFlow save that never finished: judge it.
        if list(path.parent.glob(f"{path.name}{_TF_DATA_MARK}*")):
            return DetectedCheckpoint("tf-bundle", path)
        raise


def _load_manifest(manifest_path: Path, result: Result) -> Manifest | None:
    if not manifest_path.is_file():
        result.findings.append(
            inputs.ManifestMissing.finding(
                f"no manifest {manifest_path.name} beside the checkpoint", checkpoint=result.checkpoint, file=str(manifest_path)
            )
        )
        return None
    try:
        manifest = load_manifest(manifest_path)
    except DocumentError as exc:
        result.findings.append(inputs.ManifestInvalid.finding(str(exc), checkpoint=result.checkpoint, file=str(manifest_path)))
        return None
    result.manifest = str(manifest_path)
    return manifest


def _choose_spec(given: Spec | None, manifest: Manifest | None, manifest_path: Path, result: Result) -> Spec | None:
    recorded = manifest.spec if manifest is not None else None
    embedded = recorded.document if recorded is not None else None
    if embedded is not None and spec_digest(embedded) != recorded.sha256:  # type: ignore[union-attr]
        result.findings.append(
            inputs.SpecDigestMismatch.finding(
                f"the embedded spec {embedded.name!r} no longer has its recorded sha256 (edited after the manifest was written)",
                checkpoint=result.checkpoint,
                file=str(manifest_path),
                path=("spec", "sha256"),
            )
        )
    if given is not None and recorded is not None and spec_digest(given) != recorded.sha256:
        result.findings.append(
            inputs.SpecDiffers.finding(
                f"validating against spec {given.name!r} ({spec_digest(given)[:12]}…); the manifest was written "
                f"against {recorded.name!r} ({recorded.sha256[:12]}…)",
                checkpoint=result.checkpoint,
                file=str(manifest_path),
                path=("spec",),
            )
        )
    spec = given or embedded
    if spec is None:
        result.findings.append(
            inputs.SpecMissing.finding(
                "no spec: pass --spec, or write the manifest against one; completeness was not checked",
                checkpoint=result.checkpoint,
                file=str(manifest_path) if manifest is not None else None,
            )
        )
    result.spec = spec.name if spec is not None else None
    return spec


def _open_view(found: DetectedCheckpoint, result: Result) -> CheckpointView | None:
    if found.kind == "tf-bundle" and not Path(f"{found.path}.index").is_file():
        shards = sorted(p.name for p in found.path.parent.glob(f"{found.path.name}{_TF_DATA_MARK}*"))
        result.findings.append(
            IndexMissing.finding(
                f"{found.path.name}.index is missing; data shards without it: {', '.join(shards)}",
                checkpoint=result.checkpoint,
                file=f"{found.path}.index",
            )
        )
        return None
    try:
        view = open_view(found.path)
    except CkptspecError as exc:
        result.findings.append(inputs.CheckpointUnreadable.finding(str(exc), checkpoint=result.checkpoint, file=str(found.path)))
        return None
    result.format = view.format
    return view


def _match_manifest(ctx: Context, result: Result) -> None:
    manifest = ctx.manifest
    if manifest is None:
        return
    problems = []
    if (ctx.base / manifest.checkpoint).resolve() != ctx.checkpoint.resolve():
        problems.append(f"it names checkpoint {manifest.checkpoint!r}, not {ctx.checkpoint.name!r}")
    if ctx.view is not None and manifest.format != ctx.view.format:
        problems.append(f"it records format {manifest.format!r}, the file is {ctx.view.format!r}")
    for problem in problems:
        result.findings.append(
            inputs.ManifestCheckpointMismatch.finding(
                f"the manifest does not describe this checkpoint: {problem}",
                checkpoint=result.checkpoint,
                file=str(ctx.manifest_path),
                path=("checkpoint",) if "names" in problem else ("format",),
            )
        )


def _run_families(ctx: Context, result: Result) -> None:
    ran: list[Family] = []
    for family, check in FAMILY_CHECKS.items():
        try:
            result.findings.extend(check(ctx))
        except Exception as exc:  # noqa: BLE001 - a crashed check is reported, never a pass
            result.findings.append(
                inputs.InternalCheckError.finding(
                    f"the {family} checks crashed: {type(exc).__name__}: {exc}", checkpoint=result.checkpoint
                )
            )
        ran.append(family)
    result.families = tuple(ran)


# --------------------------------------------------------------------------------------------------
# Audit


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Every checkpoint under `paths`, in a stable order: torch/Lightning files (`.ckpt`, `.pt`,
    `.pth`), TensorFlow prefixes (from `.index` files, data shards, and `checkpoint` state files)."""
    found: dict[Path, None] = {}
    for root in map(Path, paths):
        if root.is_dir():
            for directory, names, files in os.walk(root):
                names.sort()
                for candidate in _checkpoints_in(Path(directory), sorted(files)):
                    found.setdefault(candidate)
        else:
            for candidate in _checkpoints_in(root.parent, [root.name]) or [root]:
                found.setdefault(candidate)
    return list(found)


def _checkpoints_in(directory: Path, names: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in names:
        if name.endswith(".index"):
            found.append(directory / name[: -len(".index")])
        elif _TF_DATA_MARK in name and ".tempstate" not in name:
            found.append(directory / name.split(_TF_DATA_MARK)[0])
        elif name.endswith(_TORCH_SUFFIXES) or (name.endswith(".bin") and _is_zip(directory / name)):
            found.append(directory / name)
        elif name == "checkpoint":
            found.extend(_state_file_checkpoints(directory))
    return list(dict.fromkeys(found))


def _is_zip(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except OSError:
        return False


def _state_file_checkpoints(directory: Path) -> list[Path]:
    from .formats.tf_state import read_checkpoint_state

    try:
        state = read_checkpoint_state(directory)
    except ReaderError:
        return []
    return list(dict.fromkeys([*state.all_model_checkpoint_paths, state.model_checkpoint_path]))


def audit(
    paths: Iterable[str | Path],
    spec: Spec | str | Path | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[Result], None] | None = None,
) -> Report:
    """Validate every checkpoint under `paths`, `jobs` at a time in separate processes.

    A checkpoint that cannot be read at all is a result with a `checkpoint-unreadable` finding, so
    one bad file never hides the others. `on_result` is called as each result arrives (progress).
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    checkpoints = discover(paths)
    results = dict(_validate_all(checkpoints, given_spec, jobs, on_result or (lambda _result: None)))
    return Report([results[path] for path in checkpoints])


def _validate_all(
    checkpoints: list[Path], spec: Spec | None, jobs: int, on_result: Callable[[Result], None]
) -> Iterator[tuple[Path, Result]]:
    if jobs <= 1 or len(checkpoints) <= 1:
        for path in checkpoints:
            result = _validate_or_report(path, spec)
            on_result(result)
            yield path, result
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_validate_or_report, path, spec): path for path in checkpoints}
        for future in as_completed(futures):
            result = future.result()
            on_result(result)
            yield futures[future], result


def _validate_or_report(path: Path, spec: Spec | None) -> Result:
    try:
        return validate(path, spec)
    except CkptspecError as exc:
        finding = inputs.CheckpointUnreadable.finding(str(exc), checkpoint=str(path), file=str(path))
        return Result(checkpoint=str(path), format=None, manifest=None, spec=None, findings=[finding])
