"""Judge checkpoints against their manifests and a spec: `validate` one, `audit` many in parallel.

    result = validate("runs/epoch=3-step=900.ckpt")
    for finding in result.findings:
        print(finding.code, finding.severity, finding.location, finding.message)
    raise SystemExit(result.exit_code)

Reading never runs pickle and never imports torch or TensorFlow.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from ._documents import load_manifest, load_spec, manifest_path_for, spec_digest
from ._exceptions import CkptspecError, DocumentError, ReaderError, UnsupportedFormatError
from ._exit import EXIT_CLEAN, EXIT_FINDINGS
from ._models import Manifest, PicklePolicy, Spec
from .checks import FAMILY_CHECKS, Context, Family, Finding, Severity, inputs
from .checks._view import CheckpointView, open_view
from .checks.integrity import IndexMissing, checksummed_tensors
from .checks.safety import SymlinkEscapes, link_escape, pickle_dangers
from .formats.detect import ZIP_MAGIC, DetectedCheckpoint, detect, is_dcp_directory, tf_shard_prefix

__all__ = [
    "Discovery",
    "Report",
    "Result",
    "Unsearchable",
    "audit",
    "discover",
    "judged_files",
    "severity_counts",
    "validate",
]

_TORCH_SUFFIXES = (".ckpt", ".pt", ".pth")
_PICKLE_SUFFIXES = (".pkl", ".pickle")


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

    def count(self, severity: Severity) -> int:
        return severity_counts(self.findings)[severity]

    def to_json(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "format": self.format,
            "manifest": self.manifest,
            "spec": self.spec,
            "passed": self.passed,
            "counts": severity_counts(self.findings),
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


def severity_counts(findings: Iterable[Finding]) -> dict[Severity, int]:
    """How many of `findings` there are of each severity, every severity named, most severe first."""
    counts: dict[Severity, int] = {severity: 0 for severity in get_args(Severity)}
    for finding in findings:
        counts[finding.severity] += 1
    return counts


def validate(path: str | Path, spec: Spec | str | Path | None = None, *, require_spec: bool = False) -> Result:
    """Validate one checkpoint (file, TensorFlow prefix, or a directory holding one).

    `spec` is the operator's: it decides completeness and which pickle globals are trusted. Without
    one, completeness follows the spec embedded in the manifest, or, when the manifest was written
    without a spec, what the manifest records (every file and tensor it lists must be present and
    intact; CKS004 then warns, or is an error with `require_spec`). Pickle safety never follows a
    manifest: with no operator spec it is judged by the built-in allow-list alone.

    Raises `ReaderError` when nothing at `path` is a checkpoint (`UnsupportedFormatError` when it is
    one in a format ckptspec does not read), and `DocumentError` when the given spec cannot be read;
    everything wrong with a checkpoint ckptspec reads, damage included, is a finding.
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    found = _locate(Path(path))
    result = Result(checkpoint=str(found.path), format=None, manifest=None, spec=None)
    if found.kind == "pickle":
        return _validate_bare_pickle(found, given_spec, result)
    manifest_path = manifest_path_for(found.path)
    manifest = _load_manifest(manifest_path, result)
    ctx_spec = _choose_spec(given_spec, manifest, manifest_path, result, require_spec=require_spec)
    view = _open_view(found, result, ctx_spec, trusted_tensors=checksummed_tensors(manifest, ctx_spec))
    try:
        ctx = Context(found.path, manifest_path if manifest is not None else None, manifest, ctx_spec, view)
        _match_manifest(ctx, result)
        _run_families(ctx, result)
    finally:
        if view is not None:
            view.close()
    return result


def _validate_bare_pickle(found: DetectedCheckpoint, spec: Spec | None, result: Result) -> Result:
    """A bare pickle has no manifest and no tensors to locate: judge only what loading it would call."""
    view = _open_view(found, result, spec)
    if view is not None:
        with view:
            result.spec = spec.name if spec is not None else None
            ctx = Context(found.path, None, None, spec, view)
            _run_families(ctx, result, {"safety": FAMILY_CHECKS["safety"]})
    return result


def _locate(path: Path) -> DetectedCheckpoint:
    if path.is_dir() and len(inside := discover([path]).checkpoints) == 1:
        path = inside[0]
    try:
        return detect(path)
    except ReaderError:
        # Data shards without their index are a TensorFlow save that never finished: judge it.
        if _data_shards(path):
            return DetectedCheckpoint("tf-bundle", path)
        raise


def _data_shards(prefix: Path) -> list[Path]:
    candidates = prefix.parent.glob(f"{prefix.name}*")
    return sorted(path for path in candidates if tf_shard_prefix(path.name) == prefix.name)


def _load_manifest(manifest_path: Path, result: Result) -> Manifest | None:
    escape = link_escape(manifest_path, manifest_path.parent)
    if escape is not None:
        result.findings.append(
            SymlinkEscapes.finding(f"{escape}; the manifest was not read", checkpoint=result.checkpoint, file=str(manifest_path))
        )
        return None
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


def _choose_spec(
    given: Spec | None, manifest: Manifest | None, manifest_path: Path, result: Result, *, require_spec: bool
) -> Spec | None:
    """The spec the checks judge by: the operator's (`given`), else the manifest's own with the
    built-in pickle policy in place of its own, else None (the manifest alone says what is there)."""
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
    if given is None and embedded is None:
        result.findings.append(_spec_missing(manifest, manifest_path, result, require_spec))
    spec = _operator_policy(given, embedded)
    result.spec = spec.name if spec is not None else None
    return spec


def _operator_policy(given: Spec | None, embedded: Spec | None) -> Spec | None:
    """The judging spec, whose pickle policy only the operator can widen: the uploader wrote the
    manifest, so its spec may only narrow the operator's `allow` (kept where both list a global)."""
    if given is None:
        return embedded.model_copy(update={"pickle": PicklePolicy()}) if embedded is not None else None
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
    found: DetectedCheckpoint, result: Result, spec: Spec | None, trusted_tensors: Collection[str] = ()
) -> CheckpointView | None:
    if found.kind == "tf-bundle" and not Path(f"{found.path}.index").is_file():
        shards = [shard.name for shard in _data_shards(found.path)]
        result.findings.append(
            IndexMissing.finding(
                f"{found.path.name}.index is missing; data shards without it: {', '.join(shards)}",
                checkpoint=result.checkpoint,
                file=f"{found.path}.index",
            )
        )
        return None
    try:
        view = open_view(found.path, trusted_tensors=trusted_tensors)
    except UnsupportedFormatError:
        raise  # not damage but a format ckptspec does not read: validation cannot run
    except ReaderError as exc:
        result.findings.append(inputs.CheckpointUnreadable.finding(str(exc), checkpoint=result.checkpoint, file=str(found.path)))
        # A pickle that stopped reading half-way has still named what loading it would run.
        ctx = Context(found.path, None, None, spec, None)
        result.findings.extend(pickle_dangers(ctx, getattr(exc, "globals", ()), found.path))
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


@dataclass(frozen=True)
class Unsearchable:
    """A place under an audited path that could not be searched for checkpoints."""

    path: Path
    reason: str

    def result(self) -> Result:
        """The audit result that reports it, so that nothing is skipped without a word."""
        finding = inputs.CheckpointUnreadable.finding(f"{self.path}: {self.reason}", checkpoint=str(self.path), file=str(self.path))
        return Result(checkpoint=str(self.path), format=None, manifest=None, spec=None, findings=[finding])


@dataclass(frozen=True)
class Discovery:
    checkpoints: list[Path]
    """In a stable order, each once."""
    unsearchable: list[Unsearchable]


def discover(paths: Iterable[str | Path]) -> Discovery:
    """Every checkpoint under `paths`: torch/Lightning files (`.ckpt`, `.pt`, `.pth`), TensorFlow
    prefixes (from `.index` files, data shards, and `checkpoint` state files), DCP directories, bare
    pickles (`.pkl`, `.pickle`: judged by the globals they would call); and
    every place that could not be searched (an unreadable directory, a loop of symbolic links).

    Raises `ReaderError` for a path that names nothing at all."""
    found: dict[Path, None] = {}
    unsearchable: list[Unsearchable] = []
    for root in map(Path, paths):
        if not _names_something(root):
            raise ReaderError(f"{root}: no such file, directory or TensorFlow checkpoint prefix")
        if (reason := _unfollowable(root)) is not None:
            unsearchable.append(Unsearchable(root, reason))
        elif root.is_dir():
            _search(root, found, unsearchable)
        else:
            for candidate in _checkpoints_in(root.parent, [root.name]) or [root]:
                found.setdefault(candidate)
    return Discovery(list(found), unsearchable)


def _names_something(path: Path) -> bool:
    return os.path.lexists(path) or Path(f"{path}.index").is_file() or bool(_data_shards(path))


def _search(root: Path, found: dict[Path, None], unsearchable: list[Unsearchable]) -> None:
    def unreadable(error: OSError) -> None:
        unsearchable.append(Unsearchable(Path(error.filename), f"cannot read the directory: {error.strerror}"))

    searched: set[str] = set()
    for directory, names, files in os.walk(root, onerror=unreadable, followlinks=True):
        real = os.path.realpath(directory)
        if real in searched:
            names.clear()
            if Path(os.path.realpath(os.path.dirname(directory))).is_relative_to(real):
                unsearchable.append(Unsearchable(Path(directory), f"a symbolic link back to {real}, which contains it (a loop)"))
            continue
        searched.add(real)
        names.sort()
        if is_dcp_directory(files):
            # Its shards are one checkpoint, in a format that validation then names.
            names.clear()
            found.setdefault(Path(directory))
            continue
        followable = []
        for name in sorted(files):
            reason = _unfollowable(Path(directory, name))
            if reason is None:
                followable.append(name)
            else:
                unsearchable.append(Unsearchable(Path(directory, name), reason))
        for candidate in _checkpoints_in(Path(directory), followable):
            found.setdefault(candidate)


def _unfollowable(path: Path) -> str | None:
    """Why the symbolic link at `path` cannot be followed, if it is one that cannot; a link to
    nothing is not reported: it names no checkpoint, and one named like a checkpoint is judged."""
    if not path.is_symlink():
        return None
    try:
        path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links; nothing behind it can be read"
        return f"cannot follow the symbolic link: {exc.strerror}"
    return None


def _checkpoints_in(directory: Path, names: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in names:
        if name.endswith(".index"):
            found.append(directory / name[: -len(".index")])
        elif (prefix := tf_shard_prefix(name)) is not None:
            found.append(directory / prefix)
        elif name.endswith(_TORCH_SUFFIXES + _PICKLE_SUFFIXES) or (name.endswith(".bin") and _is_zip(directory / name)):
            found.append(directory / name)
        elif name == "checkpoint":
            found.extend(_state_file_checkpoints(directory))
    return list(dict.fromkeys(found))


def judged_files(checkpoints: Iterable[Path]) -> dict[Path, str]:
    """Every file that judging `checkpoints` reads, with what it is: the checkpoints' own files (a
    file, a TensorFlow index and its data shards and state file, a directory's files) and their
    manifests, whether they exist yet or not."""
    files: dict[Path, str] = {}
    for checkpoint in checkpoints:
        for path in _own_files(checkpoint):
            files.setdefault(path, f"the checkpoint {checkpoint}" if path == checkpoint else f"a file of the checkpoint {checkpoint}")
        files.setdefault(manifest_path_for(checkpoint), f"the manifest of {checkpoint}")
    return files


def _own_files(checkpoint: Path) -> list[Path]:
    if checkpoint.is_dir():
        return sorted(checkpoint.iterdir())
    if checkpoint.is_file():
        return [checkpoint]
    return [Path(f"{checkpoint}.index"), *_data_shards(checkpoint), checkpoint.parent / "checkpoint"]


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
    require_spec: bool = False,
) -> Report:
    """Validate every checkpoint under `paths`, `jobs` at a time in separate processes.

    A checkpoint that cannot be read at all, in a format ckptspec does not read, or a place that
    could not be searched, is a result with a `checkpoint-unreadable` finding, so one bad file never
    hides the others. `on_result` is called as each checkpoint's result arrives (progress). The
    spec and `require_spec` mean what they mean for `validate`. Raises `ReaderError` for a path
    that names nothing at all.
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    discovery = discover(paths)
    judge = functools.partial(_validate_or_report, spec=given_spec, require_spec=require_spec)
    results = dict(_validate_all(discovery.checkpoints, judge, jobs, on_result or (lambda _result: None)))
    return Report([*(results[path] for path in discovery.checkpoints), *(place.result() for place in discovery.unsearchable)])


def _validate_all(
    checkpoints: list[Path], judge: Callable[[Path], Result], jobs: int, on_result: Callable[[Result], None]
) -> Iterator[tuple[Path, Result]]:
    if jobs <= 1 or len(checkpoints) <= 1:
        for path in checkpoints:
            result = judge(path)
            on_result(result)
            yield path, result
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(judge, path): path for path in checkpoints}
        for future in as_completed(futures):
            result = future.result()
            on_result(result)
            yield futures[future], result


def _validate_or_report(path: Path, spec: Spec | None, require_spec: bool) -> Result:
    try:
        return validate(path, spec, require_spec=require_spec)
    except CkptspecError as exc:
        finding = inputs.CheckpointUnreadable.finding(str(exc), checkpoint=str(path), file=str(path))
    except Exception as exc:  # noqa: BLE001 - one checkpoint that trips a bug must not end the whole audit
        finding = inputs.InternalCheckError.finding(f"validation crashed: {type(exc).__name__}: {exc}", checkpoint=str(path))
    return Result(checkpoint=str(path), format=None, manifest=None, spec=None, findings=[finding])
