"""Find the checkpoints under the paths given, by content: each one once, every other file with the
reason it is not judged, every place that could not be searched with why."""

from __future__ import annotations

import errno
import glob
import os
from collections.abc import Callable, Iterable
from dataclasses import field
from pathlib import Path

from ._dataclass import dataclass
from ._commit import discarded_bundles, leftover_of, tensorflow_staging_of
from ._exceptions import CorruptCheckpointError, ReaderError
from ._result import Result
from ._sidecars import (
    KERAS_PROGRAM_SUFFIX,
    MANIFEST_SUFFIX,
    PENDING_SUFFIX,
    PROGRAM_SUFFIX,
    SIGNATURE_SUFFIX,
    checkpoint_of_manifest,
    manifest_path_for,
    next_batches_owner,
    signature_path_for,
)
from ._storage import Location, RemotePath, exists_or_link, is_directory, is_file, location
from .checks import inputs
from .checks._registry import Rule
from .checks.paths import FileSkipped, FormatNotJudged, StatePointerDangling, StatePointerEscapes
from .checks.safety import SymlinkEscapes
from .checks.saves import SaveLeftover
from .formats._names import (
    DEEPSPEED_SCRIPTS,
    SAFETENSORS_INDEX_SUFFIX,
    STATE_FILE_NAME,
    DetectedCheckpoint,
    is_dcp_directory,
    is_deepspeed_directory,
    is_deepspeed_file,
    is_sharded_save_file,
    prefix_file,
    prefix_parts,
    tf_prefix_of,
    tf_shard_prefix,
    training_directory_kind,
)
from .formats.detect import FileFormat, detect, detect_sniffed, sniff
from .formats.hf_training import framework_wrote

__all__ = ["Discovery", "Found", "NotJudged", "data_shards", "discover", "judged_files", "locate_checkpoint", "outside"]


@dataclass(frozen=True)
class Found:
    """A checkpoint file as discovery detected it, and the file's identity then (device, inode,
    size, modification time): what judging it later takes instead of detecting it again, as long
    as the file is still the one that was detected."""

    checkpoint: DetectedCheckpoint
    identity: tuple[int, ...]

    def unchanged(self) -> bool:
        return _identity(self.checkpoint.path) == self.identity


def _identity(path: Path) -> tuple[int, ...] | None:
    """Device, inode, size and the times of the last write and status change of the file at `path`."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def locate_checkpoint(path: Path, known: Found | None = None) -> DetectedCheckpoint:
    """The checkpoint at `path`: a file, a TensorFlow prefix, or the one checkpoint a directory holds
    (a model directory with its config files beside the weights). `known` is what discovery
    detected at `path`: taken while the file is unchanged, so that it is not detected twice."""
    if known is not None and known.unchanged():
        return known.checkpoint
    if is_directory(path) and len((inside := discover([path])).checkpoints) == 1:
        path = inside.checkpoints[0]
        if (found := inside.detected.get(path)) is not None and found.unchanged():
            return found.checkpoint
    try:
        return detect(path)
    except ReaderError:
        # Data shards without their index are a TensorFlow save that never finished: judge it.
        if data_shards(path):
            return DetectedCheckpoint("tf-bundle", path)
        raise


def data_shards(prefix: Path) -> list[Path]:
    directory, name = prefix_parts(prefix)
    candidates = directory.glob(f"{glob.escape(name)}*.data-*")
    return sorted(path for path in candidates if tf_shard_prefix(path.name) == name)


@dataclass(frozen=True)
class NotJudged:
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
    not_judged: list[NotJudged]
    """Places not searched and files not judged, each with its finding."""
    confined: dict[Path, Path] = field(default_factory=dict)
    """Each checkpoint found by searching a local directory → that directory, resolved: the tree
    it must still lie in when it is judged (a link swapped in the meantime must not lead out)."""
    detected: dict[Path, Found] = field(default_factory=dict)
    """Each local checkpoint file whose format discovery named, as it named it."""


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
    not_judged: list[NotJudged] = []
    confined: dict[Path, Path] = {}
    detected: dict[Path, Found] = {}
    for root in roots:
        if (refusal := _refused(root)) is not None:
            not_judged.append(NotJudged(root, f"cannot read: {refusal}"))
            continue
        if not _names_something(root):
            raise ReaderError(f"{root}: no such file, directory or TensorFlow checkpoint prefix")
        if (reason := _unfollowable(root)) is not None:
            not_judged.append(NotJudged(root, reason))
        elif isinstance(root, RemotePath) and root.is_dir():
            _search_prefix(root, _Classifier(roots, found, not_judged, detected))
        elif root.is_dir():
            known = len(found)
            inside = Path(os.path.realpath(root))
            _search(root, inside, _Classifier(roots, found, not_judged, detected), follow_symlinks)
            confined.update((path, inside) for path in list(found)[known:])
        else:
            _Classifier(roots, found, not_judged, detected).classify(root.parent, [root.name])
    checkpoints = _judged_once(found, not_judged, detected)
    kept = set(checkpoints)
    return Discovery(
        checkpoints,
        not_judged,
        {path: confined[path] for path in checkpoints if path in confined},
        {path: found for path, found in detected.items() if path in kept},
    )


def _judged_once(found: dict[Path, None], not_judged: list[NotJudged], detected: dict[Path, Found]) -> list[Path]:
    """`found` without the links to a file found under another name, which are listed instead:
    judging both would count one checkpoint twice. The name that is no link is the one judged."""
    names: dict[str, Path] = {}
    linked: set[Path] = set()
    for path in sorted(_maybe_one_file(found, detected), key=os.path.islink):
        other = names.setdefault(os.path.realpath(path), path)
        if other != path:
            linked.add(path)
            not_judged.append(NotJudged(path, f"a symbolic link to {other}, judged under that name", FileSkipped))
    return [path for path in found if path not in linked]


def _maybe_one_file(found: dict[Path, None], detected: dict[Path, Found]) -> list[Path]:
    """The local paths of `found` that may name one file between them, in their order: those that
    share a file (a device and inode) with another, and those that name none (two broken links to
    one place are one). Only these are resolved, not every path's chain of directories; a file
    detected already has its device and inode."""
    by_file: dict[tuple[int, ...], list[Path]] = {}
    unnamed: set[Path] = set()
    for path in found:
        if isinstance(path, RemotePath):
            continue
        known = detected.get(path)
        identity = known.identity if known is not None else _identity(path)
        if identity is None:
            unnamed.add(path)
            continue
        by_file.setdefault(identity[:2], []).append(path)
    sharing = unnamed.union(*(paths for paths in by_file.values() if len(paths) > 1))
    return [path for path in found if path in sharing]


def outside(path: Path, inside: Path) -> str | None:
    """Why `path` is not followed, when a symbolic link leads it out of the directory `inside`
    (a real path, as discovery resolved it)."""
    # realpath, unlike Path.resolve, does not raise on a loop of links.
    target = Path(os.path.realpath(path))
    return None if target.is_relative_to(inside) else f"links to {target}, outside {inside}, the directory audited; not followed"


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
    return exists_or_link(path) or is_file(prefix_file(path, ".index")) or bool(data_shards(path))


def _search(root: Path, inside: Path, classifier: _Classifier, follow_symlinks: bool) -> None:
    """Sort what lies under `root` (which resolves to `inside`) without leaving `inside`."""

    def unreadable(error: OSError) -> None:
        classifier.not_judged.append(NotJudged(Path(error.filename), f"cannot read the directory: {error.strerror}"))

    searched: set[str] = set()
    held_inside: set[str] = set()  # directories a checkpoint above holds (a DeepSpeed tag, an FSDP save): judged with it
    for directory, names, files in os.walk(root, onerror=unreadable, followlinks=follow_symlinks):
        # Only a followed link reaches a directory twice: without them, no two directories walked are one.
        real = os.path.realpath(directory) if follow_symlinks else directory
        if real in searched:
            names.clear()
            if Path(os.path.realpath(os.path.dirname(directory))).is_relative_to(real):
                classifier.not_judged.append(NotJudged(Path(directory), f"a symbolic link back to {real}, which contains it (a loop)"))
            continue
        searched.add(real)
        for name in [name for name in names if os.path.islink(os.path.join(directory, name))]:
            link = Path(directory, name)
            if (escape := outside(link, inside)) is not None:
                names.remove(name)
                classifier.skip(link, escape, SymlinkEscapes)
            elif not follow_symlinks:
                names.remove(name)
                classifier.skip(link, "a symbolic link to a directory; not followed (--follow-symlinks follows it)")
        for name in list(names):
            if (leftover := leftover_of(name) or tensorflow_staging_of(Path(directory, name))) is not None:
                names.remove(name)  # a staging directory of an interrupted save: its content is no checkpoint
                classifier.skip(Path(directory, name), leftover, SaveLeftover)
        names.sort()
        followable = []
        for name in sorted(files):
            path = Path(directory, name)
            if (reason := _unfollowable(path)) is not None:
                classifier.not_judged.append(NotJudged(path, reason))
            elif os.path.islink(path) and (escape := outside(path, inside)) is not None:
                # In a directory of the tree only a link leads out (the audit asks again as it judges).
                classifier.skip(path, escape, SymlinkEscapes)
            else:
                followable.append(name)
        if (held := _held(files, lambda name: _listed(Path(directory, name)))) is not None:
            # What its format's writer put there is one checkpoint, in a format that validation then names (not
            # one whose files lead out of the tree, each reported above); anything put beside it is judged on its own.
            if len(followable) == len(files) and directory not in held_inside:
                classifier.found.setdefault(Path(directory))
            held_inside.update(os.path.join(directory, name) for name in names if held(name, True))
            followable = [name for name in followable if not held(name, False)]
        classifier.classify(Path(directory), followable)


def _search_prefix(root: RemotePath, classifier: _Classifier) -> None:
    """`_search` for a bucket prefix: one listing of every object under it, sorted folder by folder
    the same way (object stores have no links, so none is followed or looped through)."""
    folders: dict[RemotePath, list[str]] = {}
    for file in root.walk_files():
        if (problem := file.key_problem(root)) is not None:
            classifier.not_judged.append(NotJudged(file, problem))  # type: ignore[arg-type]
        else:
            folders.setdefault(file.parent, []).append(file.name)
    subfolders: dict[RemotePath, dict[str, RemotePath]] = {}
    for folder in folders:
        subfolders.setdefault(folder.parent, {})[folder.name] = folder
    held_inside: set[RemotePath] = set()
    for folder in sorted(folders, key=lambda folder: folder.path.split("/")):  # os.walk's order
        names = sorted(folders[folder])
        inside = subfolders.get(folder, {})
        if (held := _held(names, lambda name: folders[inside[name]] if name in inside else [])) is not None:
            if folder not in held_inside:
                classifier.found.setdefault(folder)
            held_inside.update(inner for name, inner in inside.items() if held(name, True))
            names = [name for name in names if not held(name, False)]
        classifier.classify(folder, names)


def _held(files: list[str], listing: Callable[[str], list[str]]) -> Callable[[str, bool], bool] | None:
    """For a directory holding `files` that is one checkpoint of several files (a DCP or DeepSpeed
    save, a Trainer or Accelerate checkpoint), whether a file (or, with True, a directory, whose
    names `listing` gives) is one its writer put there, read with it; None for any other directory."""
    if is_dcp_directory(files):
        return lambda name, directory: not directory and (is_sharded_save_file(name) or name.endswith(".safetensors"))
    if is_deepspeed_directory(files):
        return lambda name, directory: is_deepspeed_directory(listing(name)) if directory else is_deepspeed_file(name) or name in DEEPSPEED_SCRIPTS
    if (kind := training_directory_kind(files)) is not None:
        return lambda name, directory: framework_wrote(kind, name, directory=directory)
    return None


def _listed(directory: Path) -> list[str]:
    """The names in `directory`; none when it cannot be listed (the walk reports that when it gets there)."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


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
class _Classifier:
    """Classifies the files of the directories searched as checkpoints or files not judged."""

    roots: list[Path]
    found: dict[Path, None]
    not_judged: list[NotJudged]
    detected: dict[Path, Found]

    def skip(self, path: Path, reason: str, rule: Rule = FileSkipped) -> None:
        self.not_judged.append(NotJudged(path, reason, rule))

    def classify(self, directory: Path, names: list[str]) -> None:
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
            elif (batches_of := next_batches_owner(path)) is not None and _names_something(batches_of) and _no_format(path):
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
        identity = None if isinstance(path, RemotePath) else _identity(path)
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
            self._detected(path, found, identity)
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

    def _detected(self, path: Path, found: FileFormat, identity: tuple[int, ...] | None) -> None:
        """Keep what the file is, named from the sniff just made of the file with `identity` (taken
        before it); judging it names any error."""
        if identity is None:
            return
        try:
            self.detected[path] = Found(detect_sniffed(path, found), identity)
        except ReaderError:
            return

    def _manifest(self, path: Path) -> None:
        checkpoint = checkpoint_of_manifest(path)
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
    return [prefix_file(checkpoint, ".index"), *data_shards(checkpoint), directory / "checkpoint"]
