"""Question map: success per question and run (or training step of a run) as a heatmap, the
questions each run lost or gained against the one before, and accuracy across the runs with
confidence intervals."""

from __future__ import annotations

import streamlit as st

from app.dashboard.components import agents, ids_apart, nav, params, run_list, sides
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import watch_for_new_runs
from app.dashboard.question_map import reads, view
from storage.read_models import RunKey, run_of

notices = header("Question map", copy_link=True)
params.expect(nav.P_RUN, view.P_SHARED)
runs = run_list.offered()
by_id = {r.id: r for r in runs}
offered = sides.options(runs, sides.steps_of(runs))
if len(offered) < 2:
    st.info(
        "The map needs two runs on the same questions, or a training run of two steps - "
        "record them with `rollscope run`."
    )
    watch_for_new_runs(runs[0].id if runs else None)  # shown once recorded
    st.stop()
chosen_ids: list[RunKey] = st.multiselect(
    "Runs, or training steps of a run, in order (checkpoints oldest first)",
    offered,
    format_func=lambda k: sides.name_of(k, by_id),
    help="A training step (`name @ step 200`) maps that step's episodes alone: an evaluation "
    "run each few steps on the same questions maps checkpoint by checkpoint.",
    max_selections=sides.MOST_MAPPED,
    **params.bind("map_runs", nav.P_RUN, sides.codec(nav.P_RUN, offered, by_id, sides.MOST_MAPPED)),
)
params.show_notices(notices)
if len(chosen_ids) < 2:
    st.info(
        "Choose two or more runs (or training steps of a run), in the order to read them "
        "(e.g. checkpoints by step)."
    )
    st.stop()

whole = reads.map_view(tuple(chosen_ids), False)
if not whole.qmap.question_ids:
    st.info("These runs have no finished episodes yet.")
    st.stop()
shared_only = view.shared_only_control(whole)
params.show_notices(notices)  # a bad `shared=` in the link
found = reads.map_view(tuple(chosen_ids), True) if shared_only else whole
ids_apart.show(
    whole.apart,
    lambda k: sides.label_of(k, by_id),
    lambda k: sides.name_of(k, by_id),
    "each is a row of its own (`id · run N`), paired with no other run's",
)
if not found.qmap.question_ids:
    view.no_shared_questions(whole)
    st.stop()
names = {k: sides.label_of(k, by_id) for k in chosen_ids}
one_run = sides.one_training_run(chosen_ids, by_id)
agents.show([by_id[run_of(k)] for k in chosen_ids])
view.heatmap_section(found, list(names.values()), one_run)
view.accuracy_section(found, chosen_ids, list(names.values()), one_run)
view.flips_section(found.flips, names, one_run)
