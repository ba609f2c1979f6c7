"""The run as one self-contained HTML page (plotly, its JavaScript inlined: nothing is fetched when
the page is viewed): the graph of the checkpoints by global step, one lane per run, and a timeline
per counter (learning rate, optimizer step, scheduler step, samples seen), each link drawn from
parent to child, every checkpoint with an error marked where it happens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._exceptions import CkptspecError
from ._facts import CheckpointFacts
from ._judge import RunJudgement

__all__ = ["render_html"]

_TIMELINES: tuple[tuple[str, Callable[[CheckpointFacts], float | None]], ...] = (
    ("learning rate", lambda facts: facts.learning_rates[0] if facts.learning_rates else None),
    ("optimizer step", lambda facts: next((step for step in facts.optimizer_steps if step is not None), None)),
    ("scheduler step", lambda facts: facts.scheduler_steps[0] if facts.scheduler_steps else None),
    ("samples seen", lambda facts: facts.samples_seen),
)


def render_html(judgement: RunJudgement) -> str:
    try:
        from plotly.subplots import make_subplots
    except ImportError:
        raise CkptspecError("--format html needs plotly: pip install 'ckptspec[html]'") from None
    graph = judgement.graph
    errors = _errors_by_checkpoint(judgement)
    lanes = {run: index for index, run in enumerate(dict.fromkeys(graph.run_of(facts) for facts in graph.checkpoints))}
    titles = ["checkpoints and their parents (one lane per run)", *(f"{name} against global step" for name, _ in _TIMELINES)]
    figure = make_subplots(rows=1 + len(_TIMELINES), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.06)
    _draw(figure, 1, graph, lambda facts: float(lanes[graph.run_of(facts)]), errors, "checkpoint")
    for row, (name, value) in enumerate(_TIMELINES, start=2):
        _draw(figure, row, graph, value, errors, name)
    figure.update_yaxes(tickvals=list(lanes.values()), ticktext=[_inert(_short(run)) for run in lanes], row=1, col=1)
    figure.update_yaxes(type="log", row=2, col=1)  # schedules decay by factors
    figure.update_xaxes(title_text="global step", row=1 + len(_TIMELINES), col=1)
    failed = len(errors)
    figure.update_layout(
        title=f"ckptspec lineage: {len(graph.checkpoints)} checkpoints in {len(lanes)} runs, {failed} with breaks",
        height=260 * (1 + len(_TIMELINES)),
        showlegend=False,
        hovermode="closest",
    )
    return figure.to_html(full_html=True, include_plotlyjs=True, config={"displaylogo": False})


def _draw(
    figure: Any,
    row: int,
    graph: Any,
    value: Callable[[CheckpointFacts], float | None],
    errors: dict[str, list[str]],
    name: str,
) -> None:
    from plotly import graph_objects as go

    xs: list[float | None] = []
    ys: list[float | None] = []
    for found in graph.links:
        before, after = value(found.parent), value(found.child)
        if None in (before, after, found.parent.position, found.child.position):
            continue
        xs += [found.parent.position, found.child.position, None]
        ys += [before, after, None]
    figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": "#9aa5b1"}, hoverinfo="skip", name=f"{name} links"), row=row, col=1)
    points = [(facts, value(facts)) for facts in graph.checkpoints if facts.position is not None and value(facts) is not None]
    for broken in (False, True):
        chosen = [(facts, y) for facts, y in points if (facts.name in errors) is broken]
        figure.add_trace(
            go.Scatter(
                x=[facts.position for facts, _ in chosen],
                y=[y for _, y in chosen],
                mode="markers",
                marker={"symbol": "x" if broken else "circle", "size": 13 if broken else 8, "color": "#c62828" if broken else "#1565c0"},
                text=[_hover(facts, errors.get(facts.name, [])) for facts, _ in chosen],
                hoverinfo="text",
                name=f"{name} breaks" if broken else name,
            ),
            row=row,
            col=1,
        )


def _errors_by_checkpoint(judgement: RunJudgement) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in judgement.report.findings:
        if finding.severity == "error":
            found.setdefault(finding.checkpoint, []).append(f"{finding.code} {finding.name}: {finding.message}")
    return found


def _hover(facts: CheckpointFacts, errors: list[str]) -> str:
    lines = [facts.checkpoint.name, f"global step {facts.position}", f"run {_short(facts.run or 'inferred')}", *errors]
    return "<br>".join(_inert(line) for line in lines)


def _inert(text: str) -> str:
    """`text` (read from the files) as plotly shows it: its tags and entities as characters, never markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _short(run: str) -> str:
    return run if len(run) <= 14 else f"{run[:8]}…{run[-4:]}"
