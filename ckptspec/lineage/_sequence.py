"""The counters along each link of a run's graph: the global step advances, and every other counter
advances with it in the proportion the run itself showed before (scheduler and optimizer steps per
global step, samples per step); generators never return to a state the run already held.

A proportion is learnt from the links before, along the child's ancestry, and a link that breaks
it does not teach it: the run's own history is the reference, so a scheduler stepped per epoch or
gradient accumulation need no configuration. A counter off by more than one of its units from the
proportion is out of step (an epoch scheduler advances by whole steps between saves)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field, replace
from fractions import Fraction

from .._dataclass import dataclass
from .._storage import Location
from ..checks import Finding
from ..checks import lineage as rules
from ._facts import CheckpointFacts
from ._graph import Link, RunGraph

__all__ = ["sequence_findings"]


@dataclass(frozen=True)
class _History:
    """What the links along one checkpoint's ancestry showed: per counter, its total advance and
    the global steps it advanced over, on the links that did not break it."""

    advanced: dict[str, tuple[int, int]] = field(default_factory=dict)
    first_scale: float | None = None

    def proportion(self, counter: str) -> Fraction | None:
        total, steps = self.advanced.get(counter, (0, 0))
        return Fraction(total, steps) if steps > 0 else None

    def learnt(self, counter: str, advance: int, steps: int) -> _History:
        total, before = self.advanced.get(counter, (0, 0))
        return replace(self, advanced={**self.advanced, counter: (total + advance, before + steps)})


def sequence_findings(graph: RunGraph) -> Iterator[Finding]:
    replaying: set[Location] = set()
    histories: dict[Location, _History] = {}
    seen: dict[str, dict[tuple[int, str, str], list[CheckpointFacts]]] = {}
    links = {found.child.checkpoint: found for found in graph.links}
    ancestry = _Ancestry({child: found.parent.checkpoint for child, found in links.items() if not found.fork})
    for facts in graph.checkpoints:
        found = links.get(facts.checkpoint)
        parent_history = histories.get(found.parent.checkpoint, _History()) if found is not None and not found.fork else _History()
        if parent_history.first_scale is None and facts.scaler is not None:
            parent_history = replace(parent_history, first_scale=facts.scaler[0])
        history = parent_history
        if found is not None and not found.fork:
            findings, history = _judge_link(found, parent_history)
            yield from findings
        histories[facts.checkpoint] = history
        run = graph.run_of(facts) if found is None or not found.fork else f"fork:{facts.checkpoint}"
        yield from _reseeded(facts, found, seen.setdefault(run, {}), replaying, ancestry)


@dataclass(frozen=True)
class _Ancestry:
    parents: dict[Location, Location]
    """Each checkpoint → its parent in the same run."""

    def of(self, checkpoint: Location) -> set[Location]:
        """The checkpoints on `checkpoint`'s chain of parents (walked only for a state seen before)."""
        walked: set[Location] = set()
        while (checkpoint := self.parents.get(checkpoint)) is not None and checkpoint not in walked:  # type: ignore[assignment]
            walked.add(checkpoint)
        return walked


def _judge_link(found: Link, history: _History) -> tuple[list[Finding], _History]:
    parent, child = found.parent, found.child
    findings: list[Finding] = []
    steps = child.position - parent.position if child.position is not None and parent.position is not None else None
    if steps is not None and steps <= 0:
        findings.append(
            rules.StepNotAdvancing.finding(
                f"its global step {child.position} does not advance from its parent {parent.checkpoint}'s {parent.position}",
                checkpoint=child.name,
                path=("components", "data_position", "global_step"),
            )
        )
        return findings, history
    for index, (before, after) in enumerate(zip(parent.scheduler_steps, child.scheduler_steps)):
        problem, history = _counter(f"scheduler{index}", before, after, steps, history)
        if problem is not None:
            findings.append(
                rules.SchedulerOutOfStep.finding(
                    f"scheduler {index}'s step count went from {before} at {parent.checkpoint} to {after} over "
                    f"{_steps(steps)}: {problem}{_rates(parent, child, index)}",
                    checkpoint=child.name,
                    path=("components", "scheduler", index, "step"),
                )
            )
    for index, (before, after) in enumerate(zip(parent.optimizer_steps, child.optimizer_steps)):
        if before is None or after is None:
            continue
        if after < before:
            findings.append(
                rules.OptimizerReinitialised.finding(
                    f"optimizer {index}'s step count fell from {before} at {parent.checkpoint} to {after}: it started over",
                    checkpoint=child.name,
                    path=("components", "optimizer", index, "param_groups"),
                )
            )
            continue
        problem, history = _counter(f"optimizer{index}", before, after, steps, history)
        if problem is not None and child.global_step is not None:
            findings.append(
                rules.OptimizerOutOfStep.finding(
                    f"optimizer {index}'s step count went from {before} at {parent.checkpoint} to {after} over {_steps(steps)}: {problem}",
                    checkpoint=child.name,
                    path=("components", "optimizer", index, "param_groups"),
                )
            )
    findings += _cursor(found, steps, history)
    if parent.samples_seen is not None and child.samples_seen is not None and child.samples_seen >= parent.samples_seen:
        _, history = _counter("samples", parent.samples_seen, child.samples_seen, steps, history)
    findings += _scaler(found, history)
    return findings, history


def _counter(name: str, before: int, after: int, steps: int | None, history: _History) -> tuple[str | None, _History]:
    """What is wrong with a counter's advance over `steps` global steps, and the history with it
    learnt when nothing is."""
    if after < before:
        return "it fell back (it was built anew and not restored)", history
    if steps is None:
        return None, history
    proportion = history.proportion(name)
    if proportion is not None and abs((after - before) - proportion * steps) > 1:
        expected = proportion * steps
        return f"the run advanced it {_ratio(proportion)} per global step before, {float(expected):g} here", history
    return None, history.learnt(name, after - before, steps)


def _cursor(found: Link, steps: int | None, history: _History) -> list[Finding]:
    parent, child = found.parent, found.child
    where = ("components", "data_position")
    if parent.samples_seen is not None and child.samples_seen is not None:
        advance = child.samples_seen - parent.samples_seen
        proportion = history.proportion("samples")
        if advance < 0:
            problem = "it moved back"
        elif proportion is not None and steps is not None and abs(advance - proportion * steps) > proportion:
            problem = f"the run consumed {_ratio(proportion)} samples per global step before, {float(proportion * steps):g} expected here"
        else:
            return []
        message = f"samples seen went from {parent.samples_seen} at {parent.checkpoint} to {child.samples_seen} over {_steps(steps)}: {problem}"
        return [rules.DataCursorOutOfStep.finding(message, checkpoint=child.name, path=(*where, "samples_seen"))]
    before, after = (parent.epoch, parent.batch_in_epoch), (child.epoch, child.batch_in_epoch)
    if None not in before and None not in after and after < before:  # type: ignore[operator]
        message = f"the data position went back from epoch {before[0]} batch {before[1]} at {parent.checkpoint} to epoch {after[0]} batch {after[1]}"
        return [rules.DataCursorOutOfStep.finding(message, checkpoint=child.name, path=where)]
    return []


def _scaler(found: Link, history: _History) -> list[Finding]:
    parent, child = found.parent, found.child
    if parent.scaler is None or child.scaler is None:
        return []
    (scale_before, tracker_before), (scale_after, tracker_after) = parent.scaler, child.scaler
    optimizer_steps = _optimizer_advance(parent, child)
    unchanged = scale_after == scale_before
    if unchanged and (tracker_after < tracker_before or (optimizer_steps is not None and tracker_after < tracker_before + optimizer_steps)):
        problem = f"its growth tracker went from {tracker_before} to {tracker_after} with the scale unchanged at {scale_after:g}"
    elif scale_after == history.first_scale and scale_before < scale_after and optimizer_steps is not None and tracker_after >= optimizer_steps:
        problem = f"its scale went back from {scale_before:g} to the run's initial {scale_after:g} with no overflow since"
    else:
        return []
    message = f"the gradient scaler started over after {parent.checkpoint}: {problem}"
    return [rules.ScalerReset.finding(message, checkpoint=child.name, path=("components", "scaler"))]


def _optimizer_advance(parent: CheckpointFacts, child: CheckpointFacts) -> int | None:
    before = next((step for step in parent.optimizer_steps if step is not None), None)
    after = next((step for step in child.optimizer_steps if step is not None), None)
    return after - before if before is not None and after is not None and after >= before else None


def _reseeded(
    facts: CheckpointFacts,
    found: Link | None,
    seen: dict[tuple[int, str, str], list[CheckpointFacts]],
    replaying: set[Location],
    ancestry: _Ancestry,
) -> Iterator[Finding]:
    """A generator that returned to a state an earlier checkpoint along its parents (not its parent)
    held, after its parent held another; reported where the replay begins, not at each checkpoint
    after. A checkpoint of another branch holding the same state (a rollback replaying the run
    exactly) is no re-seeding."""
    parent = found.parent if found is not None and not found.fork else None
    ancestors: set[Location] | None = None
    for (rank, name), digest in sorted(facts.generators.items()):
        holders = seen.setdefault((rank, name, digest), [])
        moved = parent is not None and parent.generators.get((rank, name)) != digest
        earlier = None
        if moved and holders:
            ancestors = ancestry.of(facts.checkpoint) if ancestors is None else ancestors
            earlier = next((held for held in holders if held is not parent and held.checkpoint in ancestors), None)
        holders.append(facts)
        if earlier is not None:
            already = parent is not None and parent.checkpoint in replaying
            replaying.add(facts.checkpoint)
            if already:
                continue
            ranked = f"rank {rank}'s " if rank or any(key[0] for key in facts.generators) else ""
            yield rules.RngReseeded.finding(
                f"{ranked}{name} generator holds the state {earlier.checkpoint} held earlier in the run "
                f"(its parent {parent.checkpoint if parent else '-'} held another): it was seeded again, not restored",
                checkpoint=facts.name,
                path=("components", "rng"),
            )


def _steps(steps: int | None) -> str:
    return f"{steps} global steps" if steps is not None else "an unknown number of global steps"


def _ratio(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.4g}"


def _rates(parent: CheckpointFacts, child: CheckpointFacts, index: int) -> str:
    before = parent.learning_rates[index] if index < len(parent.learning_rates) else None
    after = child.learning_rates[index] if index < len(child.learning_rates) else None
    return f" (learning rate {before:g} then {after:g})" if before is not None and after is not None else ""
