"""Judging a run: find its checkpoints, read each one's facts (from its manifest, else from what
adoption reads in its bytes), link them and report every break, as a `Report` like `audit`'s."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from .._dataclass import dataclass
from .._documents import parse_manifest, read_document_bytes
from .._sidecars import manifest_path_for
from .._exceptions import CkptspecError
from .._discover import discover
from .._storage import Location, RemotePath, is_url, location
from .._result import Report, Result
from ..checks import Finding, inputs
from ._facts import CheckpointFacts, facts_of
from ._graph import RunGraph, link
from ._sequence import sequence_findings

__all__ = ["RunJudgement", "add_lineage", "judge_run"]


@dataclass
class RunJudgement:
    """The graph of the run's checkpoints and the report of what breaks it."""

    graph: RunGraph
    report: Report

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def judge_run(
    paths: Iterable[str | os.PathLike[str]], *, follow_symlinks: bool = False, upload: str | os.PathLike[str] | None = None
) -> RunJudgement:
    """Judge the checkpoints found under `paths` (directories, files) as the checkpoints of one or
    more runs. A checkpoint without a manifest is read as adoption would read it; one that cannot
    be read is a finding of its own and stays out of the graph.

    With `upload` (the folder of a registry upload holding them), the files' times are taken to
    tell when they were uploaded, not saved, so they order nothing (the global step does), and a
    parent recorded outside the upload is not looked for. The same holds of the times of objects
    in a storage URL: they tell when each was stored."""
    within = _absolute(location(upload)) if upload is not None else None
    found = discover([location(path) for path in paths], follow_symlinks=follow_symlinks)
    results: dict[str, Result] = {}
    checkpoints: list[CheckpointFacts] = []
    for path in found.checkpoints:
        absolute = _absolute(path)
        result = results[str(absolute)] = Result(checkpoint=str(absolute), format=None, manifest=None, spec=None, families=("lineage",))
        facts = _read(absolute, result, file_times=within is None and isinstance(absolute, Path))
        if facts is not None:
            checkpoints.append(facts)
    graph = link(checkpoints, within=within)
    for finding in [*graph.findings, *sequence_findings(graph)]:
        results[finding.checkpoint].findings.append(finding)
    return RunJudgement(graph, Report(list(results.values())))


def add_lineage(
    report: Report, paths: Iterable[str | os.PathLike[str]], *, follow_symlinks: bool = False, upload: str | os.PathLike[str] | None = None
) -> None:
    """Add to an audit's `report` what judging `paths` as runs finds, each finding under the
    checkpoint it concerns (`audit --lineage`, and registry intake with `upload`)."""
    judged = judge_run(paths, follow_symlinks=follow_symlinks, upload=upload).report
    by_checkpoint = {_key(result.checkpoint): result for result in report.results}
    for result in judged.results:
        audited = by_checkpoint.get(result.checkpoint)
        if audited is None:
            report.results.append(result)
            continue
        audited.families = (*audited.families, "lineage")
        audited.findings.extend(finding for finding in result.findings if finding.family == "lineage")


def _absolute(path: Location) -> Location:
    return path if isinstance(path, RemotePath) else Path(os.path.abspath(path))


def _key(checkpoint: str) -> str:
    """An audited checkpoint's name as the run's judgement names it."""
    return checkpoint if is_url(checkpoint) else os.path.abspath(checkpoint)


def _read(checkpoint: Location, result: Result, *, file_times: bool) -> CheckpointFacts | None:
    manifest_path = manifest_path_for(checkpoint)
    try:
        if manifest_path.is_file():
            data = read_document_bytes(manifest_path)  # once: the digest is of the bytes parsed
            manifest = parse_manifest(data, source=manifest_path)
            result.manifest = str(manifest_path)
            digest = hashlib.sha256(data).hexdigest()
        else:
            from ..adopt import adopted_manifest  # the readers load only when a checkpoint has no manifest

            manifest = adopted_manifest(checkpoint)
            digest = ""
    except (CkptspecError, OSError) as exc:
        result.findings.append(_unreadable(checkpoint, manifest_path, exc))
        return None
    result.format = manifest.format
    return facts_of(checkpoint, manifest, digest, modified_ns=_modified_ns(checkpoint) if file_times else None)


def _modified_ns(checkpoint: Path) -> int | None:
    try:
        return os.stat(checkpoint).st_mtime_ns
    except OSError:  # a TensorFlow prefix names no file
        try:
            return os.stat(f"{checkpoint}.index").st_mtime_ns
        except OSError:
            return None


def _unreadable(checkpoint: Location, manifest_path: Location, exc: Exception) -> Finding:
    findings = getattr(exc, "findings", None)
    if findings:  # adoption refused it: what it found is the reason
        return findings[0]
    if manifest_path.is_file():
        return inputs.ManifestInvalid.finding(str(exc), checkpoint=str(checkpoint), file=str(manifest_path))
    return inputs.CheckpointUnreadable.finding(str(exc), checkpoint=str(checkpoint), file=str(checkpoint))
