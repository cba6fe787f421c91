"""GRPO groups: where a run's learning signal comes from (correctness or shaping), and one
group's episodes side by side, aligned by step, with their rewards and advantages."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import agents, nav, params
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import no_runs_yet
from app.dashboard.groups import detail, overview
from storage.models import INTEGER_RANGE
from storage.read_models import GroupKey


def _group_param() -> int | None:
    """The group number in the link (0 or more); a notice and None when it is not one."""
    value = params.get_str(nav.P_GROUP)
    if value is None:
        return None
    if not value.isdecimal() or int(value) not in INTEGER_RANGE:
        params.notice(f"{nav.P_GROUP}={value!r} in the link is not a group number; ignored.")
        return None
    return int(value)


notices = header("GRPO groups", copy_link=True)
params.expect(nav.P_RUN, nav.P_QUESTION, nav.P_GROUP, nav.P_TRAIN_FROM, nav.P_TRAIN_TO)
runs = data.list_runs()
if not runs:
    no_runs_yet()
by_id = {r.id: r for r in runs}
# Without a run in the link: a run with groups first: a trainer's or an import (whose spec
# names no samples), or a batch of several samples per question.
grouped = [r for r in runs if r.is_training or int(r.spec.get("samples") or 1) > 1]
run_codec = params.choice(nav.P_RUN, list(by_id), (grouped or runs)[0].id, "a run in this store")
run_id: int = st.selectbox(
    "Run",
    list(by_id),
    format_func=lambda i: f"{by_id[i].name} (#{i})",
    # another run: back to its overview
    **params.bind(
        "gr_run",
        nav.P_RUN,
        run_codec,
        on_change=lambda: detail.back_to_overview(st.session_state["gr_run"]),
    ),
)
question = params.get_str(nav.P_QUESTION)
group_index = _group_param()
if question is None and group_index is not None:
    # A group is opened by its question and its number (`overview.group_link`); a number
    # alone is a link cut short, or typed.
    params.notice(
        f"{nav.P_GROUP}={group_index} in the link comes without its question "
        f"({nav.P_QUESTION}=...); showing all groups."
    )
run = by_id[run_id]
listing = question is None or (group_index is None and overview.by_step(run, question))
steps = overview.step_range(run) if listing else (None, None)
params.show_notices(notices)
agents.show([run])
if question is None:
    overview.show(run, steps=steps)
elif listing:
    # A question without its group (a link from the question map): its groups to pick from.
    overview.show(run, question, steps)
else:
    detail.show(run, GroupKey(question, group_index))
