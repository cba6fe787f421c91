"""What the runs selected on the Runs page open: their episodes, a comparison (the first ticked
is the baseline), a training run's curves and groups, and their full paths and settings."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from app.dashboard.components import nav
from app.dashboard.components.colors import swatch
from app.dashboard.components.render import MISSING, escape_markdown
from app.dashboard.runs import table as run_table
from storage.read_models import RunSummary


def tick_order(before: Sequence[int], ticked: Sequence[int]) -> list[int]:
    """The ticked runs in the order they were ticked: those ticked before keep their places, new
    ones follow, oldest first (the table lists newest first and may tick several at once)."""
    kept = [i for i in before if i in ticked]
    return kept + sorted(i for i in ticked if i not in kept)


def _params(runs: Sequence[RunSummary]) -> list[tuple[str, str]]:
    return [(nav.P_RUN, str(r.id)) for r in runs]


def show(chosen: Sequence[RunSummary]) -> None:
    """The links of the selected runs, in the order ticked, and their full paths."""
    if not chosen:
        st.caption("Select runs in the table to chart them, open their episodes or compare them.")
        return
    with st.container(horizontal=True, gap="medium", vertical_alignment="center"):
        st.markdown(
            "Selected: " + ", ".join(f"{swatch(r.id)} {escape_markdown(r.name)}" for r in chosen),
            width="content",
        )
        st.page_link(
            nav.EPISODES,
            label="Episodes of " + ("this run" if len(chosen) == 1 else "these runs"),
            icon=":material/table:",
            query_params=_params(chosen),
        )
        if len(chosen) >= 2:
            st.page_link(
                nav.COMPARE,
                label=f"Compare these {len(chosen)} runs",
                icon=":material/compare:",
                query_params=_params(chosen),
                help=f"{chosen[0].name}, ticked first, is the baseline",
            )
        for run in chosen:
            if not run.is_training:
                continue
            who = "" if len(chosen) == 1 else f" of {run.name}"
            st.page_link(
                nav.TRAINING,
                label=f"Training{who}",
                icon=":material/model_training:",
                query_params={nav.P_RUN: str(run.id)},
            )
            st.page_link(
                nav.GROUPS,
                label=f"GRPO groups{who}",
                icon=":material/workspaces:",
                query_params={nav.P_RUN: str(run.id)},
            )
    with st.expander("Full paths and settings of the selected runs"):
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "run": f"{r.name} #{r.id}",
                        "kind": r.kind,
                        "policy": r.policy,
                        "checkpoint": r.checkpoint or "-",
                        "source": run_table.source_of(r, whole=True),
                        "questions": str(r.spec.get("questions_path") or r.dataset or "-"),
                        "host": r.host or "-",
                    }
                    for r in chosen
                ]
            ),
            placeholder=MISSING,
            hide_index=True,
            width="stretch",
        )
