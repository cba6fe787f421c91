"""Question map: success per question and run as a heatmap, the questions each run lost or
gained against the one before, and accuracy across the runs with confidence intervals."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import agents, nav, params
from app.dashboard.components.header import header
from app.dashboard.question_map import reads, view

notices = header("Question map", copy_link=True)
params.expect(nav.P_RUN, view.P_SHARED)
runs = data.list_runs()
if len(runs) < 2:
    st.info("The map needs two runs on the same questions - record them with `rollscope run`.")
    st.stop()
by_id = {r.id: r for r in runs}
given = params.get_all(nav.P_RUN)
for twice in sorted({v for v in given if given.count(v) > 1}):
    params.notice(f"{nav.P_RUN}={twice} comes more than once in the link; the map reads it once.")
chosen_ids: list[int] = st.multiselect(
    "Runs, in order (checkpoints oldest first)",
    list(by_id),
    format_func=lambda i: f"{by_id[i].name} (#{i})",
    **params.bind("map_runs", nav.P_RUN, params.ids(nav.P_RUN, by_id)),
)
params.show_notices(notices)
if len(chosen_ids) < 2:
    st.info("Choose two or more runs, in the order to read them (e.g. checkpoints by step).")
    st.stop()

whole = reads.map_view(tuple(chosen_ids), False)
if not whole.qmap.question_ids:
    st.info("These runs have no finished episodes yet.")
    st.stop()
shared_only = view.shared_only_control(whole)
params.show_notices(notices)  # a bad `shared=` in the link
found = reads.map_view(tuple(chosen_ids), True) if shared_only else whole
if not found.qmap.question_ids:
    view.no_shared_questions(whole)
    st.stop()
names = [by_id[i].name for i in chosen_ids]
agents.show([by_id[i] for i in chosen_ids])
view.heatmap_section(found, names)
view.accuracy_section(found, chosen_ids, names)
view.flips_section(found.flips, by_id)
