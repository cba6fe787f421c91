"""Training: a training run's rollouts over its steps, the questions that flipped, and one
question across training."""

from __future__ import annotations

import streamlit as st

from app.dashboard.components import agents, nav, params, run_list
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import no_runs_yet
from app.dashboard.training import view
from storage import lifecycle

LIVE_SECONDS = 3.0
NO_RUNS = (
    "No training runs yet. One shows here as it begins: train with TRL's GRPOTrainer and "
    "`app.trl.make_rollout_func` (docs/training.md: Train with TRL) or against "
    "`rollscope env-server`, import a trainer's rollout files with `rollscope import`, or "
    "`make run` for the demo's."
)

notices = header("Training", copy_link=True)
params.expect(nav.P_RUN, nav.P_QUESTION)
runs = run_list.offered(training=True)
if not runs:
    no_runs_yet(NO_RUNS)
by_id = {r.id: r for r in runs}
run_codec = params.choice(nav.P_RUN, list(by_id), runs[0].id, "a training run in this store")
run_id: int = st.selectbox(
    "Training run",
    list(by_id),
    format_func=lambda i: f"{by_id[i].name} (#{i})",
    # another run, other questions: the question picker goes back to its default
    **params.bind(
        "tr_run",
        nav.P_RUN,
        run_codec,
        on_change=lambda: params.forget("tr_question", nav.P_QUESTION),
    ),
)
chosen_run = by_id[run_id]
view.settings_caption(chosen_run)
view.evaluation_link(chosen_run, runs)
agents.show([chosen_run])
live = chosen_run.status in lifecycle.ACTIVE
if live:
    st.caption(f"Live: refreshes every {LIVE_SECONDS:.0f} s while the run trains.")
st.fragment(run_every=LIVE_SECONDS if live else None)(view.curves)(run_id)
view.flips(chosen_run)
view.question(chosen_run)
params.show_notices(notices)
