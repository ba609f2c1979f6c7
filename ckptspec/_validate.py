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
import glob
import os
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from ._storage import Location, RemotePath, exists_or_link, is_directory, is_file, location, resolutions_kept, resolved
from ._documents import load_manifest, load_spec, spec_digest, spec_digest_matches
from ._sidecars import MANIFEST_SUFFIX, manifest_path_for
from ._exceptions import CkptspecError, CorruptCheckpointError, DocumentError, ReaderError, UnsupportedFormatError
from ._exit import EXIT_CLEAN, EXIT_FINDINGS
from ._models import Manifest, PicklePolicy, Spec
from ._scan import FileDigests
from .checks import FAMILY_CHECKS, Context, Family, Finding, Severity, exported_program, inputs, keras_program
from ._views.base import CheckpointView
from ._views.open import open_view
from .checks._registry import Rule
from .checks.integrity import IndexMissing, checksummed_tensors, recorded_digests
from ._commit import discarded_bundles, leftover_of, manifest_choice, tensorflow_staging_of
from ._sidecars import PENDING_SUFFIX
from .checks.saves import SaveInterrupted, SaveLeftover
from .checks.paths import FileSkipped, FormatNotJudged, FrameworkMismatch, StatePointerDangling, StatePointerEscapes
from .checks.safety import SymlinkEscapes, link_escape, tree_escape, unreadable_finding
from .checks.pickles import pickle_dangers
from .formats.detect import detect, training_directory_kind, sniff
from .formats._names import (
    SAFETENSORS_INDEX_SUFFIX,
    STATE_FILE_NAME,
    DetectedCheckpoint,
    is_dcp_directory,
    is_deepspeed_directory,
    prefix_file,
    prefix_parts,
    tf_prefix_of,
    tf_shard_prefix,
)
from ._sidecars import KERAS_PROGRAM_SUFFIX, PROGRAM_SUFFIX, next_batches_of
from .formats.hf_training import saved_with_callback
from ._sidecars import TRAINER_STATE
from .formats._source import remote_files_watched
from .signing import Trust
from ._sidecars import SIGNATURE_SUFFIX, signature_path_for
from .signing import verify as verify_signature

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


def validate(
    path: str | Path,
    spec: Spec | str | Path | None = None,
    *,
    require_spec: bool = False,
    trust: Trust | None = None,
    replay: bool = False,
) -> Result:
    """Validate one checkpoint (file, TensorFlow prefix, or a directory holding one).

    `spec` is the operator's: it decides completeness and which pickle globals are trusted. Without
    one, completeness follows the spec embedded in the manifest, or, when the manifest was written
    without a spec, what the manifest records (every file and tensor it lists must be present and
    intact; CKS004 then warns, or is an error with `require_spec`). Pickle safety never follows a
    manifest: with no operator spec it is judged by the built-in allow-list alone.

    The signature beside the checkpoint is judged by `trust` (default: the `signature:` of the given
    spec; a spec embedded in the manifest can only make a signature required, never name who is
    trusted). An exported program beside the checkpoint is judged without torch; `replay=True` also
    runs the fixed batch through it (`ckptspec.replay`, needs torch).

    Raises `ReaderError` when nothing at `path` is a checkpoint (`UnsupportedFormatError` when it is
    one in a format ckptspec does not read), and `DocumentError` when the given spec cannot be read;
    everything wrong with a checkpoint ckptspec reads, damage included, is a finding.
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, given_spec)
    with resolutions_kept(), remote_files_watched() as rewritten:
        result = _validate(location(path), given_spec, trust, require_spec=require_spec, replay=replay)
        result.findings.extend(
            inputs.CheckpointUnreadable.finding(
                f"{remote}: {change}; the verdict would mix its versions: judge it again once it is no longer written",
                checkpoint=result.checkpoint,
                file=str(remote),
            )
            for remote, change in rewritten()
        )
    return result


def _validate(path: Location, given_spec: Spec | None, trust: Trust, *, require_spec: bool, replay: bool) -> Result:
    found = locate_checkpoint(path)
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
        if replay:
            result.findings.extend(_replayed(ctx, result))
    finally:
        if view is not None:
            view.close()
    embedded_requires = ctx_spec is not None and ctx_spec.signature.require
    result.findings.extend(verify_signature(found.path, trust.joined(Trust(required=embedded_requires))))
    return result


def _replayed(ctx: Context, result: Result) -> list[Finding]:
    unsafe = [finding for finding in result.findings if finding.family == "safety" and finding.severity == "error"]
    if unsafe or ctx.manifest is None:
        reason = "the checkpoint is judged unsafe to load" if unsafe else "the checkpoint has no manifest"
        return [exported_program.ReplayNotRun.finding(f"replay not run: {reason}", checkpoint=result.checkpoint)]
    from .replay import replay

    return replay(ctx.checkpoint, spec=ctx.spec, manifest=ctx.manifest)


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


def locate_checkpoint(path: Path) -> DetectedCheckpoint:
    """The checkpoint at `path`: a file, a TensorFlow prefix, or the one checkpoint a directory holds
    (a model directory with its config files beside the weights)."""
    if is_directory(path) and len(inside := discover([path]).checkpoints) == 1:
        path = inside[0]
    try:
        return detect(path)
    except ReaderError:
        # Data shards without their index are a TensorFlow save that never finished: judge it.
        if _data_shards(path):
            return DetectedCheckpoint("tf-bundle", path)
        raise


def _data_shards(prefix: Path) -> list[Path]:
    directory, name = prefix_parts(prefix)
    candidates = directory.glob(f"{glob.escape(name)}*.data-*")
    return sorted(path for path in candidates if tf_shard_prefix(path.name) == name)


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
        # The defaults need no validation; validating them would build the model's validator.
        return embedded.model_copy(update={"pickle": PicklePolicy.model_construct()}) if embedded is not None else None
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
        shards = [shard.name for shard in _data_shards(found.path)]
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
        result.findings.extend(pickle_dangers(ctx, getattr(exc, "globals", ()), found.path))
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
            FrameworkMismatch.finding(
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


@dataclass(frozen=True)
class Unsearchable:
    """A place under an audited path that could not be searched for checkpoints, or a file found there
    that is not judged: the finding that says why (`rule`), so that nothing is skipped without a word."""

    path: Path
    reason: str
    rule: Rule = inputs.CheckpointUnreadable

    def result(self) -> Result:
        """The audit result that reports it."""
        finding = self.rule.finding(f"{self.path}: {self.reason}", checkpoint=str(self.path), file=str(self.path))
        return Result(checkpoint=str(self.path), format=None, manifest=None, spec=None, findings=[finding])


@dataclass(frozen=True)
class Discovery:
    checkpoints: list[Path]
    """In a stable order, each once."""
    unsearchable: list[Unsearchable]
    """Places not searched and files not judged, each with its finding."""
    confined: dict[Path, Path] = field(default_factory=dict)
    """Each checkpoint found by searching a local directory → that directory, resolved: the tree
    it must still lie in when it is judged (a link swapped in the meantime must not lead out)."""


def discover(paths: Iterable[str | Path], *, follow_symlinks: bool = False) -> Discovery:
    """Every checkpoint under `paths`, recognised by content, never by name alone: torch zip archives
    (Lightning and PyTorch files, TorchScript, whatever their suffix), legacy torch files, safetensors
    files and sharded indexes (`*.safetensors.index.json`, which stand for their shards), Keras files,
    TensorFlow prefixes (from `.index` files, data shards, and `checkpoint` state files, whose
    pointers are never followed out of `paths`), DCP directories and bare pickles (judged by the
    globals they would call); and every other file with the reason it is not judged, and every place
    that could not be searched (an unreadable directory, a loop of symbolic links). Symbolic links to
    directories are followed only with `follow_symlinks`, and never out of the directory searched: a
    symbolic link (to a directory or a file, relative or absolute, through a chain of links) that
    leads out of it is a `SymlinkEscapes` finding naming the link and its target, and nothing behind
    it is read. A file reached under two names (a link to a checkpoint beside it) is judged once,
    under the name that is no link.

    Raises `ReaderError` for a path that names nothing at all."""
    roots = [location(path) for path in paths]
    found: dict[Path, None] = {}
    unsearchable: list[Unsearchable] = []
    confined: dict[Path, Path] = {}
    for root in roots:
        if (refusal := _refused(root)) is not None:
            unsearchable.append(Unsearchable(root, f"cannot read: {refusal}"))
            continue
        if not _names_something(root):
            raise ReaderError(f"{root}: no such file, directory or TensorFlow checkpoint prefix")
        if (reason := _unfollowable(root)) is not None:
            unsearchable.append(Unsearchable(root, reason))
        elif isinstance(root, RemotePath) and root.is_dir():
            _search_prefix(root, _Sorting(roots, found, unsearchable))
        elif root.is_dir():
            known = len(found)
            inside = Path(os.path.realpath(root))
            _search(root, inside, _Sorting(roots, found, unsearchable), follow_symlinks)
            confined.update((path, inside) for path in list(found)[known:])
        else:
            _Sorting(roots, found, unsearchable).sort(root.parent, [root.name])
    checkpoints = _judged_once(found, unsearchable)
    return Discovery(checkpoints, unsearchable, {path: confined[path] for path in checkpoints if path in confined})


def _judged_once(found: dict[Path, None], unsearchable: list[Unsearchable]) -> list[Path]:
    """`found` without the links to a file found under another name, which are listed instead:
    judging both would count one checkpoint twice. The name that is no link is the one judged."""
    names: dict[str, Path] = {}
    for path in sorted((path for path in found if not isinstance(path, RemotePath)), key=os.path.islink):
        other = names.setdefault(os.path.realpath(path), path)
        if other != path:
            unsearchable.append(Unsearchable(path, f"a symbolic link to {other}, judged under that name", FileSkipped))
    kept = set(names.values())
    return [path for path in found if isinstance(path, RemotePath) or path in kept]


def _outside(path: Path, inside: Path) -> str | None:
    """Why `path` is not followed, when a symbolic link leads it out of the directory `inside`."""
    escape = tree_escape(path, inside)
    return None if escape is None else f"{escape.removeprefix(f'{path.name}: ')}, the directory audited; not followed"


def _refused(path: Location) -> str | None:
    """Why the system refuses to say what is at local `path` (a directory above it that may not be
    searched), if it does; a missing path is not refused."""
    if isinstance(path, RemotePath):
        return None
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return error.strerror
    return None


def _names_something(path: Location) -> bool:
    return exists_or_link(path) or is_file(prefix_file(path, ".index")) or bool(_data_shards(path))


def _search(root: Path, inside: Path, sorting: _Sorting, follow_symlinks: bool) -> None:
    """Sort what lies under `root` (which resolves to `inside`) without leaving `inside`."""

    def unreadable(error: OSError) -> None:
        sorting.unsearchable.append(Unsearchable(Path(error.filename), f"cannot read the directory: {error.strerror}"))

    searched: set[str] = set()
    for directory, names, files in os.walk(root, onerror=unreadable, followlinks=follow_symlinks):
        real = os.path.realpath(directory)
        if real in searched:
            names.clear()
            if Path(os.path.realpath(os.path.dirname(directory))).is_relative_to(real):
                sorting.unsearchable.append(Unsearchable(Path(directory), f"a symbolic link back to {real}, which contains it (a loop)"))
            continue
        searched.add(real)
        for name in [name for name in names if os.path.islink(os.path.join(directory, name))]:
            link = Path(directory, name)
            if (escape := _outside(link, inside)) is not None:
                names.remove(name)
                sorting.skip(link, escape, SymlinkEscapes)
            elif not follow_symlinks:
                names.remove(name)
                sorting.skip(link, "a symbolic link to a directory; not followed (--follow-symlinks follows it)")
        for name in list(names):
            if (leftover := leftover_of(name) or tensorflow_staging_of(Path(directory, name))) is not None:
                names.remove(name)  # a staging directory of an interrupted save: its content is no checkpoint
                sorting.skip(Path(directory, name), leftover, SaveLeftover)
        names.sort()
        followable = []
        for name in sorted(files):
            path = Path(directory, name)
            if (reason := _unfollowable(path)) is not None:
                sorting.unsearchable.append(Unsearchable(path, reason))
            elif (escape := _outside(path, inside)) is not None:
                sorting.skip(path, escape, SymlinkEscapes)
            else:
                followable.append(name)
        if is_dcp_directory(files) or is_deepspeed_directory(files) or training_directory_kind(files):
            # Its shards (or rank files and tag directories) are one checkpoint, in a format that validation then names;
            # not one whose files lead out of the tree, each of them reported above.
            names.clear()
            if len(followable) == len(files):
                sorting.found.setdefault(Path(directory))
            continue
        sorting.sort(Path(directory), followable)


def _search_prefix(root: RemotePath, sorting: _Sorting) -> None:
    """`_search` for a bucket prefix: one listing of every object under it, sorted folder by folder
    the same way (object stores have no links, so none is followed or looped through)."""
    folders: dict[RemotePath, list[str]] = {}
    for file in root.walk_files():
        if (problem := file.key_problem(root)) is not None:
            sorting.unsearchable.append(Unsearchable(file, problem))  # type: ignore[arg-type]
        else:
            folders.setdefault(file.parent, []).append(file.name)
    claimed: list[RemotePath] = []
    for folder in sorted(folders, key=lambda folder: folder.path.split("/")):  # os.walk's order
        if any(folder.is_relative_to(directory) for directory in claimed):
            continue  # inside a DCP or DeepSpeed directory, judged as part of it
        names = sorted(folders[folder])
        if is_dcp_directory(names) or is_deepspeed_directory(names) or training_directory_kind(names):
            claimed.append(folder)
            sorting.found.setdefault(folder)
        else:
            sorting.sort(folder, names)


def _unfollowable(path: Path) -> str | None:
    """Why the symbolic link at `path` cannot be followed, if it is one that cannot; a link to
    nothing is not reported: it names no checkpoint, and one named like a checkpoint is judged."""
    try:
        if not path.is_symlink():
            return None
    except OSError:  # what is there cannot be looked at: judging it names the error
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


_SIDECAR_SUFFIXES = (SIGNATURE_SUFFIX, PROGRAM_SUFFIX, KERAS_PROGRAM_SUFFIX)
_CHECKPOINT_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle", ".tar", ".th", ".jit", ".joblib", ".npy")
"""Names a loader is usually pointed at: such a file is judged even when its content is no known
format, so that a damaged checkpoint is reported as damaged rather than skipped."""
_GENERIC_SUFFIXES = (".bin",)
"""Checkpoint names that many other formats share (CoreML weights, GGML models, raw dumps): such a
file whose content is no known format is listed, not judged; an empty one is still judged."""


def _no_format(path: Path) -> bool:
    """Whether `path` holds no format a loader reads: a companion's name does not hide a pickle."""
    try:
        return sniff(path) is None
    except ReaderError:
        return False


@dataclass
class _Sorting:
    """Sorts the files of the directories searched into checkpoints and files not judged."""

    roots: list[Path]
    found: dict[Path, None]
    unsearchable: list[Unsearchable]

    def skip(self, path: Path, reason: str, rule: Rule = FileSkipped) -> None:
        self.unsearchable.append(Unsearchable(path, reason, rule))

    def sort(self, directory: Path, names: list[str]) -> None:
        indexed = any(name.endswith(SAFETENSORS_INDEX_SUFFIX) for name in names)
        discarded = discarded_bundles(directory, names)
        for name in names:
            path = directory / name
            if (leftover := leftover_of(name) or discarded.get(name)) is not None:
                self.skip(path, leftover, SaveLeftover)
            elif name.endswith(PENDING_SUFFIX):
                self._pending(path)
            elif name.endswith(MANIFEST_SUFFIX):
                self._manifest(path)
            elif name.endswith(_SIDECAR_SUFFIXES) and _names_something(path.with_suffix("")):
                continue  # a checkpoint's signature or exported program, judged with it
            elif (batches_of := next_batches_of(name)) is not None and _names_something(directory / batches_of) and _no_format(path):
                continue  # the batches a run drew after saving the checkpoint: training code reads it on resume
            elif name == STATE_FILE_NAME and self._state_file(directory):
                continue
            elif name.endswith(SAFETENSORS_INDEX_SUFFIX):
                self.found.setdefault(path)
            elif indexed and name.endswith(".safetensors"):
                continue  # a shard, judged through the index beside it (which names it, or says it does not)
            else:
                self._file(path)

    def _file(self, path: Path) -> None:
        try:
            found = sniff(path)
        except ReaderError as exc:
            if not isinstance(exc, CorruptCheckpointError) or path.name.endswith(_CHECKPOINT_SUFFIXES):
                self.found.setdefault(path)  # judging it reports why it cannot be read
            else:
                self.skip(path, f"{exc}".removeprefix(f"{path}: "))
            return
        prefix = tf_prefix_of(path)
        if found is not None and found.reader is not None and found.reader != "tf-bundle":
            self.found.setdefault(path)
        elif found is not None and found.runs_code:
            self.skip(path, f"{found.description}; {found.refusal}", FormatNotJudged)
        elif prefix is not None:
            self.found.setdefault(prefix)
        elif found is None and path.name.endswith(_GENERIC_SUFFIXES):
            self.skip(path, f"named like a checkpoint ({path.suffix}), but its content is no checkpoint format; no loader unpickles it")
        elif found is None and path.name.endswith(_CHECKPOINT_SUFFIXES):
            self.found.setdefault(path)
        elif found is not None:
            self.skip(path, f"{found.description}; {found.refusal}")
        else:
            self.skip(path, "no checkpoint format recognised by its content; no loader unpickles it")

    def _manifest(self, path: Path) -> None:
        checkpoint = path.with_name(path.name[: -len(MANIFEST_SUFFIX)]) if path.name != MANIFEST_SUFFIX else path.parent
        if not _names_something(checkpoint):
            self.skip(path, f"a manifest whose checkpoint {checkpoint.name} is not here")

    def _pending(self, path: Path) -> None:
        checkpoint = path.with_name(path.name[: -len(PENDING_SUFFIX)])
        if not _names_something(checkpoint):
            self.skip(path, f"the new manifest of an interrupted save of {checkpoint.name}, which is not here", SaveLeftover)

    def _state_file(self, directory: Path) -> bool:
        """Sort the checkpoints `directory`'s state file names; False when it is not a state file."""
        from .formats.tf_state import pointer_dangles, pointer_escape, read_checkpoint_state

        state_path = directory / STATE_FILE_NAME
        try:
            if sniff(state_path) is not None:
                return False
            state = read_checkpoint_state(directory)
        except ReaderError:
            return False
        escaping, dangling = [], []
        for prefix in dict.fromkeys([*state.all_model_checkpoint_paths, state.model_checkpoint_path]):
            if (escape := pointer_escape(prefix, self.roots)) is not None:
                escaping.append(escape)
            elif (dangles := pointer_dangles(prefix)) is not None:
                dangling.append(dangles)
            else:
                self.found.setdefault(prefix)
        for rule, messages in ((StatePointerEscapes, escaping), (StatePointerDangling, dangling)):
            if messages:
                self.skip(state_path, "; ".join(messages), rule)
        return True


def judged_files(checkpoints: Iterable[Path]) -> dict[Path, str]:
    """Every file that judging `checkpoints` reads, with what it is: the checkpoints' own files (a
    file, a TensorFlow index and its data shards and state file, a directory's files), their
    manifests and signatures, whether they exist yet or not."""
    files: dict[Path, str] = {}
    for checkpoint in checkpoints:
        for path in _own_files(checkpoint):
            files.setdefault(path, f"the checkpoint {checkpoint}" if path == checkpoint else f"a file of the checkpoint {checkpoint}")
        files.setdefault(manifest_path_for(checkpoint), f"the manifest of {checkpoint}")
        files.setdefault(signature_path_for(checkpoint), f"the signature of {checkpoint}")
    return files


def _own_files(checkpoint: Path) -> list[Path]:
    if is_directory(checkpoint):
        try:
            return sorted(checkpoint.iterdir())
        except OSError:  # judging it reports that it cannot be read
            return []
    if checkpoint.name.endswith(SAFETENSORS_INDEX_SUFFIX):
        return [checkpoint, *sorted(checkpoint.parent.glob("*.safetensors"))]  # the shards it may name
    if is_file(checkpoint):
        return [checkpoint]
    directory, _name = prefix_parts(checkpoint)
    return [prefix_file(checkpoint, ".index"), *_data_shards(checkpoint), directory / "checkpoint"]


def audit(
    paths: Iterable[str | Path],
    spec: Spec | str | Path | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[Result], None] | None = None,
    trust: Trust | None = None,
    executor: str = "local",
    follow_symlinks: bool = False,
    require_spec: bool = False,
    replay: bool = False,
    discovery: Discovery | None = None,
) -> Report:
    """Validate every checkpoint under `paths`, `jobs` at a time in separate processes.

    A checkpoint that cannot be read at all, in a format ckptspec does not read, or a place that
    could not be searched, is a result with a `checkpoint-unreadable` finding, so one bad file never
    hides the others; so is every other file found, with why it is not judged. Symbolic links to
    directories are followed only with `follow_symlinks`. `on_result` is called as each checkpoint's
    result arrives (progress). The spec, `require_spec`, `trust` and `replay` mean what they mean
    for `validate`. `executor="dask"` runs the validations on a Dask LocalCluster of `jobs` workers,
    `"dask://host:port"` on that scheduler's cluster; the results are the same as the local pool's.
    `discovery` is `discover(paths)` when the caller already searched them (the paths are then not
    searched again). Raises `ReaderError` for a path that names nothing at all.
    """
    given_spec = load_spec(spec) if isinstance(spec, (str, Path)) else spec
    trust = trust if trust is not None else operator_trust(spec, given_spec)
    discovery = discovery if discovery is not None else discover(paths, follow_symlinks=follow_symlinks)
    judge = functools.partial(_validate_or_report, spec=given_spec, trust=trust, require_spec=require_spec, replay=replay)
    judge = functools.partial(_judged_inside, judge, discovery.confined)
    if executor == "local":
        validated = _validate_all(discovery.checkpoints, judge, jobs)
    else:
        from ._dask import scheduler_address, validate_on_dask

        validated = validate_on_dask(discovery.checkpoints, judge, address=scheduler_address(executor), jobs=jobs)
    results = {}
    for path, result in validated:
        if on_result is not None:
            on_result(result)
        results[path] = result
    return Report([*(results[path] for path in discovery.checkpoints), *(place.result() for place in discovery.unsearchable)])


Judge = Callable[[Path], Result]
"""Validation of one checkpoint under one policy: `_validate_or_report` with the spec, trust and
`require_spec` bound (a partial, so that it travels to worker processes)."""


def _validate_all(checkpoints: list[Path], judge: Judge, jobs: int) -> Iterator[tuple[Path, Result]]:
    if jobs <= 1 or len(checkpoints) <= 1:
        for path in checkpoints:
            yield path, judge(path)
        return
    import multiprocessing  # only for --jobs
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # A forked worker starts with every module the parent loaded; a spawned one (the default on some
    # platforms and Python versions) imports ckptspec again, about a fifth of a second each.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else None)
    workers = min(jobs, len(checkpoints))
    with ProcessPoolExecutor(workers, context, initializer=_set_worker_judge, initargs=(judge,)) as pool:
        futures = {pool.submit(_judge_in_worker, path): path for path in checkpoints}
        for future in as_completed(futures):
            yield futures[future], future.result()


_worker_judge: Judge | None = None


def _set_worker_judge(judge: Judge) -> None:
    """The policy goes to each worker once, not with every checkpoint."""
    global _worker_judge
    _worker_judge = judge


def _judge_in_worker(path: Path) -> Result:
    assert _worker_judge is not None, "the pool's initializer sets the judge"
    return _worker_judge(path)


def _judged_inside(judge: Judge, confined: Mapping[Path, Path], path: Path) -> Result:
    """`judge(path)` for a checkpoint that still lies in the tree it was found in, asked again once
    judged: a link swapped since discovery, or while the checkpoint was read, is a `SymlinkEscapes`
    error, never a verdict on a file outside the tree."""
    inside = confined.get(path)
    if inside is not None and (escape := _outside(path, inside)) is not None:
        return Unsearchable(path, f"{escape} (it was replaced by a link since it was found)", SymlinkEscapes).result()
    result = judge(path)
    if inside is not None and (escape := _outside(path, inside)) is not None:
        message = f"{path}: {escape} (it was replaced by a link while it was judged; the verdict does not hold)"
        result.findings.append(SymlinkEscapes.finding(message, checkpoint=str(path), file=str(path)))
    return result


def _validate_or_report(path: Path, *, spec: Spec | None, trust: Trust, require_spec: bool, replay: bool) -> Result:
    try:
        return validate(path, spec, trust=trust, require_spec=require_spec, replay=replay)
    except CkptspecError as exc:
        finding = inputs.CheckpointUnreadable.finding(str(exc), checkpoint=str(path), file=str(path))
    except Exception as exc:  # noqa: BLE001 - one checkpoint that trips a bug must not end the whole audit
        finding = inputs.InternalCheckError.finding(f"validation crashed: {type(exc).__name__}: {exc}", checkpoint=str(path))
    return Result(checkpoint=str(path), format=None, manifest=None, spec=None, findings=[finding])
