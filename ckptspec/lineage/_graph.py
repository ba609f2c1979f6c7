"""The graph of a run's checkpoints: each checkpoint linked to its parent, as its manifest records it
(by path and manifest digest, else by the parent's model state under its run and place), or, for a
checkpoint whose manifest records no lineage, inferred from its directory's counters and times.

Linking reports what breaks the chain itself: a parent missing or replaced, two children of one
parent in one run (a fork, or a rollback when the run had newer checkpoints), a run begun from
another run's weights."""

from __future__ import annotations

import bisect
import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path

from .._dataclass import dataclass
from .._documents import read_document_bytes
from .._exceptions import CkptspecError
from .._models import Retention
from .._sidecars import manifest_path_for
from .._storage import Location, RemotePath
from ..checks import Finding, lineage as rules
from ._facts import CheckpointFacts

__all__ = ["Link", "RunGraph", "link"]


@dataclass(frozen=True)
class Link:
    """`child` continued from `parent`."""

    parent: CheckpointFacts
    child: CheckpointFacts
    resumed: bool
    """The child's process resumed from the parent (where a break usually happens)."""
    fork: bool
    inferred: bool
    rewritten: bool = False
    """The parent's file was written again since, with the very same state and another lineage:
    a resume from an older checkpoint replaying the run exactly (training on a CPU is exact)."""
    resumed_ns: int | None = None
    """When the child's process resumed from the parent, where its manifest records it."""


@dataclass
class RunGraph:
    checkpoints: list[CheckpointFacts]
    """Each checkpoint judged, copies (`last.ckpt`) left out, parents before children."""
    links: list[Link]
    """Each checkpoint's link to its parent, in the order of `checkpoints`."""
    copies: dict[Location, CheckpointFacts] = field(default_factory=dict)
    """A checkpoint holding the same state and lineage as one judged → that one."""
    findings: list[Finding] = field(default_factory=list)

    def run_of(self, facts: CheckpointFacts) -> str:
        """The run a checkpoint belongs to: its recorded id, else its directory (inferred)."""
        return facts.run if facts.run is not None else f"{facts.checkpoint.parent}{os.sep}"


def link(checkpoints: Iterable[CheckpointFacts], *, within: Location | None = None) -> RunGraph:
    """The graph of `checkpoints`; with `within` (an upload's folder), a parent recorded outside
    it is not looked for: the upload holds part of a run."""
    distinct, copies = _without_copies(checkpoints)
    by_path = {facts.checkpoint: facts for facts in distinct}
    by_state = {(facts.state, facts.run, facts.sequence): facts for facts in distinct if facts.state is not None}
    links: dict[Location, Link] = {}
    findings: list[Finding] = []
    recorded = [facts for facts in distinct if facts.lineage is not None]
    judged = _Judged(by_path, by_state, copies, _places(recorded))
    for facts in recorded:
        found = _recorded_parent(facts, judged, findings, within)
        if found is not None:
            links[facts.checkpoint] = found
    for group in _directories(facts for facts in distinct if facts.lineage is None).values():
        for parent, child in zip(group, group[1:]):
            links[child.checkpoint] = Link(parent, child, resumed=False, fork=False, inferred=True)
        findings += [
            rules.LineageInferred.finding(
                "its manifest records no lineage: its parent is inferred from its directory's file times and steps",
                checkpoint=facts.name,
                path=("lineage",),
            )
            for facts in group
        ]
    ordered = _parents_first(distinct, links)
    graph = RunGraph(ordered, [links[facts.checkpoint] for facts in ordered if facts.checkpoint in links], copies, findings)
    graph.findings += _branches(graph)
    graph.findings += _foreign_starts(graph)
    graph.findings += _unproven_resumes(recorded)
    return graph


def _unproven_resumes(recorded: Iterable[CheckpointFacts]) -> list[Finding]:
    findings = []
    for facts in recorded:
        parent = facts.lineage.parent if facts.lineage is not None else None
        if parent is None or not parent.resumed or (parent.attested is not None and "data_order" in parent.attested):
            continue
        if parent.attested is None:
            said = "nothing of what the resume restored was measured before its first step"
        else:
            said = f"the resume was measured ({', '.join(parent.attested)}), not its data order: its first batches were not compared with the run's"
        message = f"its process resumed from {parent.checkpoint}; {said}"
        findings.append(rules.ResumeUnproven.finding(message, checkpoint=facts.name, path=("lineage", "parent", "attested")))
    return findings


def _without_copies(checkpoints: Iterable[CheckpointFacts]) -> tuple[list[CheckpointFacts], dict[Location, CheckpointFacts]]:
    """One checkpoint per state and lineage: a `last.ckpt` saved beside each checkpoint is a copy."""
    first: dict[object, CheckpointFacts] = {}
    copies: dict[Location, CheckpointFacts] = {}
    for facts in sorted(checkpoints, key=_saved_order):
        key = (facts.state, facts.lineage.model_dump_json()) if facts.state is not None and facts.lineage is not None else facts.checkpoint
        if key in first:
            copies[facts.checkpoint] = first[key]
        else:
            first[key] = facts
    return list(first.values()), copies


def _saved_order(facts: CheckpointFacts) -> tuple[bool, object, bool, int, str]:
    """When `facts` was saved: `created` has whole seconds, so two saves within one are ordered by
    their files' times, and only then by name."""
    return (facts.created is None, facts.created or 0, facts.modified_ns is None, facts.modified_ns or 0, facts.name)


@dataclass(frozen=True)
class _Judged:
    """The checkpoints judged, as a recorded parent is looked for among them."""

    by_path: dict[Location, CheckpointFacts]
    by_state: dict[tuple[str | None, str | None, int | None], CheckpointFacts]
    copies: dict[Location, CheckpointFacts]
    places: dict[str, list[int]]
    """Per run, the places in it the judged checkpoints hold, in order."""

    def kept_before(self, run: str | None, place: int | None) -> int | None:
        """How many judged checkpoints of `run` come before `place` in it; None where either is unknown."""
        if run is None or place is None:
            return None
        return bisect.bisect_left(self.places.get(run, []), place)


def _places(recorded: Iterable[CheckpointFacts]) -> dict[str, list[int]]:
    places: dict[str, list[int]] = defaultdict(list)
    for facts in recorded:
        if facts.run is not None and facts.sequence is not None:
            places[facts.run].append(facts.sequence)
    return {run: sorted(held) for run, held in places.items()}


def _recorded_parent(facts: CheckpointFacts, judged: _Judged, findings: list[Finding], within: Location | None) -> Link | None:
    assert facts.lineage is not None
    parent = facts.lineage.parent
    if parent is None:
        return None
    place = _beside(facts.checkpoint.parent, parent.checkpoint)
    named = judged.by_path.get(place) or judged.copies.get(place)
    if named is not None and named.manifest_sha256 == parent.manifest_sha256:
        return Link(named, facts, resumed=parent.resumed, fork=parent.fork, inferred=False, resumed_ns=parent.resumed_ns)
    same_state = judged.by_state.get((parent.state_sha256, parent.run, parent.sequence))
    if same_state is not None and same_state is not facts:
        rewritten = named is same_state  # its file was written again with the very same state
        return Link(same_state, facts, resumed=parent.resumed, fork=parent.fork, inferred=False, rewritten=rewritten, resumed_ns=parent.resumed_ns)
    if named is None and within is not None and not place.is_relative_to(within):
        return None  # an earlier part of the run, which the upload does not hold: nothing outside it is read
    on_disk = _manifest_digest(place)
    if named is None and on_disk is not None and on_disk == parent.manifest_sha256:
        return None  # the parent is intact, outside the judged paths
    if named is not None or on_disk is not None:
        findings.append(
            rules.ParentReplaced.finding(
                f"its parent {place} has another manifest than the one recorded when this checkpoint was made from it "
                f"(recorded sha256 {(parent.manifest_sha256 or 'none')[:12]}, there now {(on_disk or 'none')[:12]}): "
                "it was replaced or edited",
                checkpoint=facts.name,
                path=("lineage", "parent", "manifest_sha256"),
            )
        )
    elif (kept := judged.kept_before(parent.run, parent.sequence)) == 0:
        findings.append(
            rules.ParentMissing.finding(
                f"its parent {place} is not there, and no checkpoint judged here comes before it in its run: the run's "
                "earlier checkpoints were removed (a retention such as save_total_limit or save_top_k) or are elsewhere, "
                "so its chain is shown from this checkpoint on",
                checkpoint=facts.name,
                path=("lineage", "parent", "checkpoint"),
                severity="info",
            )
        )
    elif (kept_by := _kept_by_metric(facts.lineage.retention, kept)) is not None:
        findings.append(
            rules.ParentMissing.finding(
                f"its parent {place} is not there: the run {kept_by} and removed the others as it saved more, and of its "
                f"checkpoints judged here no more than those best come before this one; its chain is shown from this checkpoint on",
                checkpoint=facts.name,
                path=("lineage", "parent", "checkpoint"),
                severity="info",
            )
        )
    else:
        findings.append(
            rules.ParentMissing.finding(
                f"its parent {place} is not there (neither among the judged checkpoints nor on disk), "
                "while an earlier checkpoint of its run is: the chain has a hole",
                checkpoint=facts.name,
                path=("lineage", "parent", "checkpoint"),
            )
        )
    return None


def _kept_by_metric(retention: Retention | None, kept: int | None) -> str | None:
    """What the run's writer keeps, where that explains the `kept` checkpoints before a missing
    parent: a retention by age alone removes a run's first checkpoints, never one between two it
    keeps; one by a metric keeps at most its best however old."""
    if retention is None or retention.best is None or kept is None or kept > retention.best:
        return None
    best = f"its best {retention.best} by {retention.metric}" if retention.metric else f"its best {retention.best}"
    return f"keeps {best} and its newest {retention.newest}" if retention.newest else f"keeps {best}"


def _beside(directory: Location, relative: str) -> Location:
    """The place `relative` (a recorded parent, relative to its child's directory) names."""
    if isinstance(directory, RemotePath):
        return directory / relative  # joined and normalised
    return Path(os.path.normpath(directory / relative))


def _manifest_digest(checkpoint: Location) -> str | None:
    try:
        return hashlib.sha256(read_document_bytes(manifest_path_for(checkpoint))).hexdigest()
    except (CkptspecError, OSError):
        return None


def _directories(checkpoints: Iterable[CheckpointFacts]) -> dict[Location, list[CheckpointFacts]]:
    """Checkpoints without lineage by directory, in the order they were written (their files'
    modification times), then by global step: a step that restarts must not reorder the run."""
    groups: dict[Location, list[CheckpointFacts]] = defaultdict(list)
    for facts in checkpoints:
        groups[facts.checkpoint.parent].append(facts)
    for group in groups.values():
        group.sort(key=lambda item: (item.modified_ns is None, item.modified_ns or 0, item.position is None, item.position or 0, item.name))
    return groups


def _parents_first(checkpoints: list[CheckpointFacts], links: dict[Location, Link]) -> list[CheckpointFacts]:
    children: dict[Location, list[CheckpointFacts]] = defaultdict(list)
    for found in links.values():
        children[found.parent.checkpoint].append(found.child)
    ordered: list[CheckpointFacts] = []
    roots = [facts for facts in checkpoints if facts.checkpoint not in links]
    stack = list(reversed(roots))
    while stack:
        facts = stack.pop()
        ordered.append(facts)
        stack.extend(reversed(children.get(facts.checkpoint, [])))
    return ordered


def _branches(graph: RunGraph) -> list[Finding]:
    """A resume from a checkpoint older than the run's newest (rollback); else a second child of one
    parent in one run (an undeclared fork)."""
    findings = []
    newest: dict[str, list[CheckpointFacts]] = defaultdict(list)
    for facts in graph.checkpoints:
        if facts.run is not None:
            newest[facts.run].append(facts)
    children: dict[Location, list[Link]] = defaultdict(list)
    for found in graph.links:
        if not found.fork and not found.inferred:
            children[found.parent.checkpoint].append(found)
    # A checkpoint written again by a resumed process, after a child was made from its first version.
    replayed = {found.parent.checkpoint: found.child for found in graph.links if found.rewritten and found.parent is not found.child}
    for found in graph.links:
        if found.fork or found.inferred or not found.resumed:
            continue
        newer = replayed.get(found.child.checkpoint) or _newer_before(found, newest[graph.run_of(found.child)])
        if newer is not None:
            findings.append(
                rules.Rollback.finding(
                    f"its process resumed from {found.parent.checkpoint} (place {found.parent.sequence} in its run) while the "
                    f"run's newer {newer.checkpoint} (place {newer.sequence}) already existed",
                    checkpoint=found.child.name,
                    path=("lineage", "parent"),
                )
            )
    reported = {finding.checkpoint for finding in findings}
    for siblings in children.values():
        ordered = sorted(siblings, key=lambda item: (item.child.modified_ns is None, item.child.modified_ns or 0, item.child.name))
        for later in ordered[1:]:
            if later.child.name not in reported and later.child.run == ordered[0].child.run:
                findings.append(
                    rules.UndeclaredFork.finding(
                        f"it is a second child of {later.parent.checkpoint} in run {later.child.run}, beside "
                        f"{ordered[0].child.checkpoint}; no fork was declared",
                        checkpoint=later.child.name,
                        path=("lineage", "parent"),
                    )
                )
    return findings


def _newer_before(found: Link, run: list[CheckpointFacts]) -> CheckpointFacts | None:
    """The run's newest checkpoint written before the child's process resumed (where its manifest
    records when; else before the child was written), when it is newer than the parent. Times are
    the files' modification times, to the nanosecond: a manifest's `created` has whole seconds."""
    parent, child = found.parent, found.child
    cutoff = found.resumed_ns if found.resumed_ns is not None else child.modified_ns
    if parent.sequence is None or cutoff is None:
        return None
    candidates = [
        facts
        for facts in run
        if facts.sequence is not None
        and facts.sequence > parent.sequence
        and facts.modified_ns is not None
        and facts.modified_ns < cutoff
    ]
    return max(candidates, key=lambda facts: facts.sequence or 0, default=None)


def _foreign_starts(graph: RunGraph) -> list[Finding]:
    """A run's first checkpoint whose model began training with another run's saved state."""
    by_state: dict[str, CheckpointFacts] = {}
    for facts in graph.checkpoints:
        if facts.state is not None:
            by_state.setdefault(facts.state, facts)
    findings = []
    for facts in graph.checkpoints:
        lineage = facts.lineage
        if lineage is None or lineage.parent is not None or lineage.start_sha256 is None:
            continue
        source = by_state.get(lineage.start_sha256)
        if source is not None and source.run != facts.run:
            findings.append(
                rules.StartedFromOtherRun.finding(
                    f"its run {facts.run} began training from the weights of {source.checkpoint} (run {source.run}) "
                    "without resuming from it or declaring a fork",
                    checkpoint=facts.name,
                    path=("lineage", "start_sha256"),
                )
            )
    return findings
