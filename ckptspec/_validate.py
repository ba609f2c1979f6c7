"""Judge checkpoints against their manifests and a spec: `validate` one, `audit` many in parallel.

    result = validate("runs/epoch=3-step=900.ckpt")
    for finding in result.findings:
        print(finding.code, finding.severity, finding.location, finding.message)
    raise SystemExit(result.exit_code)

Reading never runs pickle and never imports torch or TensorFlow.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._storage import Location, RemotePath, location, resolutions_kept, resolved
from ._documents import read_manifest, read_spec, spec_digest, spec_digest_matches
from ._discover import Discovery, Found, NotJudged, data_shards, discover, locate_checkpoint, outside
from ._result import Executor, Judge, Report, Result
from ._forked_pool import judged_in_workers
from ._exceptions import CkptspecError, DocumentError, ReaderError, UnsupportedFormatError
from ._scan import FileDigests
from .checks import FAMILY_CHECKS, Context, Family, Finding, exported_program, inputs, keras_program
from ._views.base import CheckpointView
from ._views.open import open_view
from .checks.files import IndexMissing, recorded_digests
from .checks.tensors import checksummed_tensors
from ._commit import manifest_choice
from .checks.saves import SaveInterrupted
from .checks.safety import SymlinkEscapes, link_escape, unreadable_finding
from .checks.pickles import pickle_dangers
from .formats._names import DetectedCheckpoint, prefix_file
from .formats.hf_training import saved_with_callback
from ._sidecars import TRAINER_STATE
from .formats._source import remote_files_watched
from .signing import Trust, verify as verify_signature

if TYPE_CHECKING:
    from ._models import Manifest, Spec

__all__ = ["ExtraCheck", "audit", "operator_trust", "validate"]

ExtraCheck = Callable[[Context, Result], list[Finding]]
"""A check beyond the rule families, handed to `validate` by its caller: the checkpoint's context
and its result so far (to see whether it is safe to load) → its findings."""


def validate(
    path: str | Path,
    spec: Spec | str | Path | None = None,
    *,
    require_spec: bool = False,
    trust: Trust | None = None,
    extra_checks: Sequence[ExtraCheck] = (),
) -> Result:
    """Validate one checkpoint (file, TensorFlow prefix, or a directory holding one).

    `spec` is the operator's: it decides completeness and which pickle globals are trusted. Without
    one, completeness follows the spec embedded in the manifest, or, when the manifest was written
    without a spec, what the manifest records (every file and tensor it lists must be present and
    intact; CKS004 then warns, or is an error with `require_spec`). Pickle safety never follows a
    manifest: with no operator spec it is judged by the built-in allow-list alone.

    The signature beside the checkpoint is judged by `trust` (default: the `signature:` of the given
    spec; a spec embedded in the manifest can only make a signature required, never name who is
    trusted). An exported program beside the checkpoint is judged without torch. `extra_checks` run
    after the rule families, each given the checkpoint's context and its result so far: the caller
    hands in what needs an optional stack (`ckptspec.replay.replay_check` runs the fixed batch
    through the exported program, with torch), which this module never imports.

    Raises `ReaderError` when nothing at `path` is a checkpoint (`UnsupportedFormatError` when it is
    one in a format ckptspec does not read), and `DocumentError` when the given spec cannot be read;
    everything wrong with a checkpoint ckptspec reads, damage included, is a finding.
    """
    given_spec = read_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, given_spec)
    return _validate_watched(location(path), given_spec, trust, require_spec=require_spec, extra_checks=extra_checks)


def _validate_watched(
    path: Location, spec: Spec | None, trust: Trust, *, require_spec: bool, extra_checks: Sequence[ExtraCheck], known: Found | None = None
) -> Result:
    """`_validate`, with a remote file rewritten while it was read reported; `known`: what discovery
    detected at `path`."""
    with resolutions_kept(), remote_files_watched() as rewritten:
        result = _validate(path, spec, trust, require_spec=require_spec, extra_checks=extra_checks, known=known)
        result.findings.extend(
            inputs.CheckpointUnreadable.finding(
                f"{remote}: {change}; the verdict would mix its versions: judge it again once it is no longer written",
                checkpoint=result.checkpoint,
                file=str(remote),
            )
            for remote, change in rewritten()
        )
    return result


def _validate(
    path: Location, given_spec: Spec | None, trust: Trust, *, require_spec: bool, extra_checks: Sequence[ExtraCheck], known: Found | None
) -> Result:
    found = locate_checkpoint(path, known)
    result = Result(checkpoint=str(found.path), format=None, manifest=None, spec=None)
    if found.kind in ("pickle", "archive"):
        return _validate_bare_pickle(found, given_spec, result)
    choice = manifest_choice(found.path)
    manifest_path = choice.path
    if choice.interrupted is not None:
        result.findings.append(SaveInterrupted.finding(choice.interrupted, checkpoint=result.checkpoint, file=str(choice.pending)))
    manifest = _load_manifest(manifest_path, result, interrupted=_interrupted_trainer_save(found))
    ctx_spec = _choose_spec(given_spec, manifest, manifest_path, result, require_spec=require_spec)
    recorded = recorded_digests(manifest, ctx_spec, manifest_path.parent)
    view = _open_view(found, result, ctx_spec, trusted_tensors=checksummed_tensors(manifest, ctx_spec), recorded=recorded)
    try:
        ctx = Context(found.path, manifest_path if manifest is not None else None, manifest, ctx_spec, view)
        _match_manifest(ctx, result)
        _match_framework(ctx, result)
        _run_families(ctx, result)
        result.findings.extend(exported_program.check(ctx))
        result.findings.extend(keras_program.check(ctx))
        for check in extra_checks:
            result.findings.extend(check(ctx, result))
    finally:
        if view is not None:
            view.close()
    embedded_requires = ctx_spec is not None and ctx_spec.signature.require
    result.findings.extend(verify_signature(found.path, trust.joined(Trust(required=embedded_requires))))
    return result


def operator_trust(spec: Spec | str | Path | None, loaded: Spec | None) -> Trust:
    """The signers the operator's spec trusts, its relative key paths taken from the spec file's directory."""
    if loaded is None:
        return Trust()
    base = Path(spec).parent if isinstance(spec, (str, Path)) else Path.cwd()
    return Trust.from_policy(loaded.signature, base)


def _validate_bare_pickle(found: DetectedCheckpoint, spec: Spec | None, result: Result) -> Result:
    """A bare pickle has no manifest and no tensors to locate: judge only what loading it would call."""
    view = _open_view(found, result, spec)
    if view is not None:
        with view:
            result.spec = spec.name if spec is not None else None
            ctx = Context(found.path, None, None, spec, view)
            _run_families(ctx, result, {"safety": FAMILY_CHECKS["safety"]})
    return result


def _interrupted_trainer_save(found: DetectedCheckpoint) -> str | None:
    """Why a Hugging Face Trainer checkpoint has no manifest, when a save with ckptspec's callback
    was interrupted between the Trainer's last file and the manifest; None otherwise."""
    if found.kind != "hf-trainer" or isinstance(found.path, RemotePath) or not saved_with_callback(found.path):
        return None
    return (
        f"saved with ckptspec.transformers.CkptspecCallback (its record is in {TRAINER_STATE}), but its manifest was never "
        "written: the save was interrupted after the Trainer wrote the checkpoint; the next train() in its output "
        "directory with the callback writes it"
    )


def _load_manifest(manifest_path: Path, result: Result, *, interrupted: str | None = None) -> Manifest | None:
    """The manifest at `manifest_path`, or None with the finding that says why there is none
    (`interrupted`: the save that would have written it was interrupted, in words)."""
    escape = link_escape(manifest_path, manifest_path.parent)
    if escape is not None:
        result.findings.append(
            SymlinkEscapes.finding(f"{escape}; the manifest was not read", checkpoint=result.checkpoint, file=str(manifest_path))
        )
        return None
    if not manifest_path.is_file():
        if interrupted is not None:
            result.findings.append(SaveInterrupted.finding(interrupted, checkpoint=result.checkpoint, file=str(manifest_path)))
            return None
        result.findings.append(
            inputs.ManifestMissing.finding(
                f"no manifest {manifest_path.name} beside the checkpoint", checkpoint=result.checkpoint, file=str(manifest_path)
            )
        )
        return None
    try:
        manifest = read_manifest(manifest_path)
    except DocumentError as exc:
        result.findings.append(inputs.ManifestInvalid.finding(str(exc), checkpoint=result.checkpoint, file=str(manifest_path)))
        return None
    result.manifest = str(manifest_path)
    return manifest


def _choose_spec(
    given: Spec | None, manifest: Manifest | None, manifest_path: Path, result: Result, *, require_spec: bool
) -> Spec | None:
    """The spec the checks judge by: the operator's (`given`), else the manifest's own with the
    built-in pickle policy in place of its own, else None (the manifest alone says what is there)."""
    recorded = manifest.spec if manifest is not None else None
    embedded = recorded.document if recorded is not None else None
    if embedded is not None and not spec_digest_matches(embedded, recorded.sha256):  # type: ignore[union-attr]
        result.findings.append(
            inputs.SpecDigestMismatch.finding(
                f"the embedded spec {embedded.name!r} no longer has its recorded sha256 (edited after the manifest was written)",
                checkpoint=result.checkpoint,
                file=str(manifest_path),
                path=("spec", "sha256"),
            )
        )
    if given is not None and recorded is not None and not spec_digest_matches(given, recorded.sha256):
        result.findings.append(
            inputs.SpecDiffers.finding(
                f"validating against spec {given.name!r} ({spec_digest(given)[:12]}…); the manifest was written "
                f"against {recorded.name!r} ({recorded.sha256[:12]}…)",
                checkpoint=result.checkpoint,
                file=str(manifest_path),
                path=("spec",),
            )
        )
    if given is None and embedded is None:
        result.findings.append(_spec_missing(manifest, manifest_path, result, require_spec))
    spec = _operator_policy(given, embedded)
    result.spec = spec.name if spec is not None else None
    return spec


def _operator_policy(given: Spec | None, embedded: Spec | None) -> Spec | None:
    """The judging spec, whose pickle policy only the operator can widen: the uploader wrote the
    manifest, so its spec may only narrow the operator's `allow` (kept where both list a global)."""
    if given is None:
        # `unknown_globals` has one value: the built-in policy is the embedded one with nothing allowed.
        return embedded.model_copy(update={"pickle": embedded.pickle.model_copy(update={"allow": []})}) if embedded is not None else None
    if embedded is None:
        return given
    narrowed = [entry for entry in given.pickle.allow if entry in embedded.pickle.allow]
    return given.model_copy(update={"pickle": given.pickle.model_copy(update={"allow": narrowed})})


def _spec_missing(manifest: Manifest | None, manifest_path: Path, result: Result, require_spec: bool) -> Finding:
    judged = "what the manifest records was checked" if manifest is not None else "only the files were checked"
    return inputs.SpecMissing.finding(
        f"no spec: {judged}, not completeness against a declared policy; pass --spec "
        "(or write the manifest against a spec)",
        checkpoint=result.checkpoint,
        file=str(manifest_path) if manifest is not None else None,
        severity="error" if require_spec else "warning",
    )


def _open_view(
    found: DetectedCheckpoint,
    result: Result,
    spec: Spec | None,
    trusted_tensors: Collection[str] = (),
    recorded: Mapping[Path, FileDigests] | None = None,
) -> CheckpointView | None:
    if found.kind == "tf-bundle" and not prefix_file(found.path, ".index").is_file():
        shards = [shard.name for shard in data_shards(found.path)]
        result.findings.append(
            IndexMissing.finding(
                f"{found.path.name}.index is missing; data shards without it: {', '.join(shards)}",
                checkpoint=result.checkpoint,
                file=str(prefix_file(found.path, ".index")),
            )
        )
        return None
    try:
        view = open_view(found, trusted_tensors=trusted_tensors, recorded=recorded)
    except UnsupportedFormatError:
        raise  # not damage but a format ckptspec does not read: validation cannot run
    except ReaderError as exc:
        result.findings.append(unreadable_finding(exc, result.checkpoint, str(found.path)))
        # A pickle that stopped reading half-way has still named what loading it would run.
        ctx = Context(found.path, None, None, spec, None)
        result.findings.extend(pickle_dangers(ctx, exc.globals, found.path))
        return None
    result.format = view.format
    return view


def _match_manifest(ctx: Context, result: Result) -> None:
    manifest = ctx.manifest
    if manifest is None:
        return
    problems = []
    if resolved(ctx.base / manifest.checkpoint) != resolved(ctx.checkpoint):
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


_FRAMEWORK_OF_FORMAT = {"torch": "torch", "lightning": "lightning", "tf-bundle": "tensorflow"}


def _match_framework(ctx: Context, result: Result) -> None:
    declared = ctx.spec.framework if ctx.spec is not None else None
    actual = _FRAMEWORK_OF_FORMAT.get(ctx.view.format) if ctx.view is not None else None
    if declared is not None and actual is not None and declared != actual:
        result.findings.append(
            inputs.FrameworkMismatch.finding(
                f"the spec {ctx.spec.name!r} declares framework: {declared}, but this is a {actual} checkpoint",  # type: ignore[union-attr]
                checkpoint=result.checkpoint,
                file=str(ctx.checkpoint),
            )
        )


def _run_families(
    ctx: Context, result: Result, families: Mapping[Family, Callable[[Context], Iterable[Finding]]] = FAMILY_CHECKS
) -> None:
    ran: list[Family] = []
    for family, check in families.items():
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


def audit(
    paths: Iterable[str | Path],
    spec: Spec | str | Path | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[Result], None] | None = None,
    trust: Trust | None = None,
    executor: Executor | None = None,
    follow_symlinks: bool = False,
    require_spec: bool = False,
    extra_checks: Sequence[ExtraCheck] = (),
    discovery: Discovery | None = None,
) -> Report:
    """Validate every checkpoint under `paths`, `jobs` at a time in separate processes.

    A checkpoint that cannot be read at all, in a format ckptspec does not read, or a place that
    could not be searched, is a result with a `checkpoint-unreadable` finding, so one bad file never
    hides the others; so is every other file found, with why it is not judged. Symbolic links to
    directories are followed only with `follow_symlinks`. `on_result` is called as each checkpoint's
    result arrives (progress). The spec, `require_spec`, `trust` and `extra_checks` mean what they
    mean for `validate`. `executor` runs the validations elsewhere than a local pool of `jobs`
    processes (`ckptspec._dask.dask_executor` on a Dask cluster); the results are the same.
    `discovery` is `discover(paths)` when the caller already searched them (the paths are then not
    searched again). Raises `ReaderError` for a path that names nothing at all.
    """
    given_spec = read_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, given_spec)
    discovery = discovery if discovery is not None else discover(paths, follow_symlinks=follow_symlinks)
    judge = functools.partial(
        _validate_or_report, spec=given_spec, trust=trust, require_spec=require_spec, extra_checks=extra_checks, detected=discovery.detected
    )
    judge = functools.partial(_judged_inside, judge, discovery.confined)
    validated = (executor or _validate_all)(discovery.checkpoints, judge, jobs)
    results = {}
    for path, result in validated:
        if on_result is not None:
            on_result(result)
        results[path] = result
    return Report([*(results[path] for path in discovery.checkpoints), *(place.result() for place in discovery.not_judged)])


def _validate_all(checkpoints: list[Path], judge: Judge, jobs: int) -> Iterator[tuple[Path, Result]]:
    if jobs <= 1 or len(checkpoints) <= 1:
        for path in checkpoints:
            yield path, judge(path)
        return
    # The parent judges the first checkpoint itself, so the readers and views its kind needs are
    # imported once, before any fork, instead of once in every worker.
    first, rest = checkpoints[0], checkpoints[1:]
    yield first, judge(first)
    if sys.platform == "linux":
        yield from judged_in_workers(rest, judge, jobs)
    else:
        yield from _judged_in_spawned(rest, judge, jobs)


def _judged_in_spawned(checkpoints: list[Path], judge: Judge, jobs: int) -> Iterator[tuple[Path, Result]]:
    """A pool of fresh interpreters, where forking a process that may hold threads is not safe."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = min(jobs, len(checkpoints))
    # Several batches per worker, so that they finish together: a pickled round trip per
    # checkpoint costs the parent more than judging a small one takes.
    size = max(1, min(_BATCH_LIMIT, len(checkpoints) // (workers * 4)))
    batches = [checkpoints[start : start + size] for start in range(0, len(checkpoints), size)]
    with ProcessPoolExecutor(workers, initializer=_set_worker_judge, initargs=(judge,)) as pool:
        futures = [pool.submit(_judge_batch, batch) for batch in batches]
        for future in as_completed(futures):
            yield from future.result()


_BATCH_LIMIT = 32
"""Checkpoints handed to a spawned worker at once, at most: progress still moves, and one large
checkpoint holds back few others."""

_worker_judge: Judge | None = None


def _set_worker_judge(judge: Judge) -> None:
    """The policy goes to each worker once, not with every checkpoint."""
    global _worker_judge
    _worker_judge = judge


def _judge_batch(paths: list[Path]) -> list[tuple[Path, Result]]:
    assert _worker_judge is not None, "the pool's initializer sets the judge"
    return [(path, _worker_judge(path)) for path in paths]


def _judged_inside(judge: Judge, confined: Mapping[Path, Path], path: Path) -> Result:
    """`judge(path)` for a checkpoint that still lies in the tree it was found in, asked again once
    judged: a link swapped since discovery, or while the checkpoint was read, is a `SymlinkEscapes`
    error, never a verdict on a file outside the tree."""
    inside = confined.get(path)
    if inside is not None and (escape := outside(path, inside)) is not None:
        return NotJudged(path, f"{escape} (it was replaced by a link since it was found)", SymlinkEscapes).result()
    result = judge(path)
    if inside is not None and (escape := outside(path, inside)) is not None:
        message = f"{path}: {escape} (it was replaced by a link while it was judged; the verdict does not hold)"
        result.findings.append(SymlinkEscapes.finding(message, checkpoint=str(path), file=str(path)))
    return result


def _validate_or_report(
    path: Path, *, spec: Spec | None, trust: Trust, require_spec: bool, extra_checks: Sequence[ExtraCheck], detected: Mapping[Path, Found]
) -> Result:
    try:
        return _validate_watched(path, spec, trust, require_spec=require_spec, extra_checks=extra_checks, known=detected.get(path))
    except CkptspecError as exc:
        finding = inputs.CheckpointUnreadable.finding(str(exc), checkpoint=str(path), file=str(path))
    except Exception as exc:  # noqa: BLE001 - one checkpoint that trips a bug must not end the whole audit
        finding = inputs.InternalCheckError.finding(f"validation crashed: {type(exc).__name__}: {exc}", checkpoint=str(path))
    return Result(checkpoint=str(path), format=None, manifest=None, spec=None, findings=[finding])
