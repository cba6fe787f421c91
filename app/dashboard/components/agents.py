"""A line for the pages that count a run's episodes as samples of their questions (Compare, the
Question map, GRPO groups, Training), when a run holds the traces of several trained agents a
line (a verifiers v1 episode of two players): each agent's trace is an episode, and their
rewards average into the question's figures."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from app.dashboard.components.render import escape_markdown
from app.dashboard.data import cached_read
from storage.read_models import RunSummary
from storage.store import Store

_NAMES_SHOWN = 4


@cached_read()
def run_agents(store: Store, run_ids: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    """The agents whose traces each run holds, for the runs whose files name any."""
    return store.run_agents(run_ids)


def agents_line(run_name: str, agents: Sequence[str]) -> str | None:
    """The caption for a run of these agents; None for a run of one agent or none."""
    if len(agents) < 2:
        return None
    names = ", ".join(f'"{escape_markdown(a)}"' for a in agents[:_NAMES_SHOWN])
    if len(agents) > _NAMES_SHOWN:
        names += f" and {len(agents) - _NAMES_SHOWN} more"
    return (
        f"{escape_markdown(run_name)} holds the traces of {len(agents)} trained agents "
        f"({names}): each trace is a sample of its question here, so the agents' rewards "
        "average together."
    )


def agents_of(runs: Sequence[RunSummary]) -> dict[int, tuple[str, ...]]:
    """The agents each run's traces name, for the runs whose files name any."""
    # Only a verifiers import names agents; other runs are not read for them.
    traced = tuple(dict.fromkeys(r.id for r in runs if r.source_format == "verifiers"))
    return run_agents(traced) if traced else {}


def show(runs: Sequence[RunSummary]) -> None:
    """A caption for each run of several agents' traces."""
    found = agents_of(runs)
    for run in {r.id: r for r in runs}.values():  # a run compared at two steps: said once
        line = agents_line(run.name, found.get(run.id, ()))
        if line is not None:
            st.caption(line)
