"""Plotly figures of the pages, built from read-model records."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from storage.read_models import Distribution, RunSummary, StoredStep

ACTION_MIX_KEYS = ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER", "UNPARSED")
_LAYOUT = {"margin": {"l": 40, "r": 10, "t": 40, "b": 40}, "height": 320}


def _name(run: RunSummary) -> str:
    return f"{run.name} (#{run.id})"


def accuracy_and_reward(runs: Sequence[RunSummary]) -> go.Figure:
    """Accuracy and mean reward per run, side by side."""
    names = [_name(r) for r in runs]
    fig = go.Figure()
    fig.add_bar(name="accuracy", x=names, y=[r.accuracy for r in runs])
    fig.add_bar(name="mean reward", x=names, y=[r.mean_reward for r in runs])
    fig.update_layout(title="Accuracy and mean reward", barmode="group", **_LAYOUT)
    return fig


def reward_distribution(dists: Sequence[Distribution], names: dict[int, str]) -> go.Figure:
    """Episode reward histogram per run (bins from the store)."""
    fig = go.Figure()
    for d in dists:
        xs = [start for start, _ in d.reward_histogram]
        fig.add_bar(
            name=names.get(d.run_id, str(d.run_id)), x=xs, y=[c for _, c in d.reward_histogram]
        )
    fig.update_layout(
        title="Episode reward",
        xaxis_title="reward (bin start)",
        yaxis_title="episodes",
        barmode="group",
        **_LAYOUT,
    )
    return fig


def steps_distribution(dists: Sequence[Distribution], names: dict[int, str]) -> go.Figure:
    """Steps-per-episode histogram per run."""
    fig = go.Figure()
    for d in dists:
        fig.add_bar(
            name=names.get(d.run_id, str(d.run_id)),
            x=[s for s, _ in d.steps_histogram],
            y=[c for _, c in d.steps_histogram],
        )
    fig.update_layout(
        title="Steps per episode",
        xaxis_title="steps",
        yaxis_title="episodes",
        barmode="group",
        **_LAYOUT,
    )
    return fig


def action_mix(dists: Sequence[Distribution], names: dict[int, str]) -> go.Figure:
    """Share of each action kind (and unparsed outputs) per run, stacked."""
    fig = go.Figure()
    labels = [names.get(d.run_id, str(d.run_id)) for d in dists]
    totals = [max(1, sum(d.action_mix.values())) for d in dists]
    for key in ACTION_MIX_KEYS:
        shares = [d.action_mix.get(key, 0) / t for d, t in zip(dists, totals, strict=True)]
        fig.add_bar(name=key, x=labels, y=shares)
    fig.update_layout(
        title="Action mix",
        yaxis_title="share of steps",
        yaxis_tickformat=".0%",
        barmode="stack",
        **_LAYOUT,
    )
    return fig


def reward_timeline(steps: Sequence[StoredStep], current: int | None = None) -> go.Figure:
    """Reward of each step, with the running total, the current step marked."""
    xs = [s.step_no for s in steps]
    rewards = [s.reward for s in steps]
    total, running = 0.0, []
    for r in rewards:
        total += r
        running.append(total)
    fig = go.Figure()
    fig.add_bar(name="step reward", x=xs, y=rewards, text=[s.action for s in steps])
    fig.add_scatter(name="cumulative", x=xs, y=running, mode="lines+markers")
    if current is not None:
        fig.add_vline(x=current, line_dash="dot", line_color="gray")
    fig.update_layout(
        title="Reward per step", xaxis_title="step", xaxis_dtick=1, **{**_LAYOUT, "height": 260}
    )
    return fig
