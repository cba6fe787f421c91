"""Training: a training run's rollouts over its steps, and one question across training."""

from __future__ import annotations

import streamlit as st

from app.dashboard import analysis, data, training_curves
from app.dashboard.components import nav, params
from app.dashboard.components.header import header
from app.dashboard.components.render import escape_markdown, fmt_num, fmt_pct, show_error, show_text
from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from storage import lifecycle
from storage.read_models import EpisodeDetail, RunSummary
from storage.training import TrainingEpisode

LIVE_SECONDS = 3.0
NO_RUNS = (
    "No training runs yet - train with TRL's GRPOTrainer and `app.trl.make_rollout_func` "
    "(README: Train with TRL), or run `make run` for the demo's."
)


def _settings(run: RunSummary) -> None:
    try:
        training = RunSpec.from_stored(run.spec).training
    except SpecError:
        training = None
    if training is None:
        return
    rewards = ", ".join(training.reward_funcs) or "-"
    st.caption(
        escape_markdown(
            f"{training.trainer} · model {training.model} · learning rate "
            f"{training.learning_rate:g} · {training.num_generations} episodes per group · "
            f"beta {training.beta:g} · max steps {training.max_steps} · temperature "
            f"{training.temperature:g} · rewards: {rewards}"
        )
    )


def _curves(run_id: int) -> None:
    run = data.get_run_uncached(run_id)
    if run is None:  # deleted since the page listed it
        st.info("This run is no longer in the store.")
        return
    curves = data.training_curves_of(run)
    last = curves.last
    # A wrapping row: at 800 px five fixed columns cut every value to "co…".
    with st.container(horizontal=True, gap="large"):
        st.metric("status", run.status, width="content")
        st.metric("episodes", run.episodes_finished, width="content")
        st.metric("training steps", curves.steps, width="content")
        st.metric("accuracy (last step)", fmt_pct(last.accuracy if last else None), width="content")
        st.metric("reward (last step)", fmt_num(last.reward if last else None, 3), width="content")
    if not curves.steps:
        st.info("No finished episodes yet.")
        return
    if curves.per_point > 1:
        st.caption(
            f"{curves.steps:,} training steps: each point is the mean of {curves.per_point} "
            "consecutive steps (weighted by their episodes, or groups for the group metrics)."
        )
    halves = st.columns(2)
    for i, (title, series, fmt) in enumerate(training_curves.CURVES):
        halves[i % 2].plotly_chart(
            training_curves.curve(curves, title, series, fmt), width="stretch", key=f"tr_{i}"
        )


def _question(run: RunSummary) -> None:
    st.subheader("One question across training")
    questions = data.training_questions(run)
    if not questions:
        st.info("No question has finished an episode yet.")
        return
    by_id = {q.question_id: q for q in questions}
    codec = params.choice(
        nav.P_QUESTION, list(by_id), questions[0].question_id, "a question played in this run"
    )
    qid: str = st.selectbox(
        "Question",
        list(by_id),
        format_func=lambda q: (
            f"{q} · {by_id[q].correct}/{by_id[q].episodes} correct · {by_id[q].question[:70]}"
        ),
        **params.bind("tr_question", nav.P_QUESTION, codec),
    )
    st.markdown(escape_markdown(by_id[qid].question))
    # The episodes of the steps shown alone: a question played at every step of a long run
    # has tens of thousands.
    shown = training_curves.shown_steps(data.played_steps(run, qid))
    episodes = data.question_episodes(run, qid, shown)
    chosen: list[tuple[int, list[TrainingEpisode], EpisodeDetail]] = []
    for step in shown:
        group = training_curves.at_step(episodes, step)
        labels = {e.id: f"sample {e.sample_index}: {e.outcome}" for e in group}
        pick: int = group[0].id
        if len(group) > 1:
            pick = st.selectbox(
                f"Episode at training step {step}",
                list(labels),
                key=f"tr_pick_{step}",
                format_func=labels.__getitem__,
            )
        detail = data.get_episode(pick)
        if detail is not None:
            chosen.append((step, group, detail))
    if not chosen:
        return
    diverge = analysis.first_divergence([d.steps for _, _, d in chosen])
    if len(chosen) > 1:
        if diverge is None:
            st.success("The episodes take the same actions.")
        else:
            st.warning(f"First divergence at action {diverge + 1}.")
    heads = st.columns(len(chosen))
    for col, (step, group, detail) in zip(heads, chosen, strict=True):
        correct = sum(e.outcome == "correct" for e in group)
        col.markdown(
            f"**Training step {step}**: {detail.summary.outcome or 'playing'}, reward "
            f"{fmt_num(detail.summary.reward, 3)} · group {correct}/{len(group)} correct"
        )
        with col:
            st.page_link(
                nav.REPLAY, label="Replay", query_params={nav.P_EPISODE: str(detail.summary.id)}
            )
    longest = max(len(d.steps) for _, _, d in chosen)
    for i in range(longest):
        marker = " ◀ first divergence" if diverge == i else ""
        st.markdown(f"**Action {i + 1}**{marker}")
        cols = st.columns(len(chosen))
        for col, (_, _, detail) in zip(cols, chosen, strict=True):
            with col:
                if i >= len(detail.steps):
                    st.caption("(episode over)")
                    continue
                s = detail.steps[i]
                st.caption(
                    f"{s.action} · reward {s.reward:+.3f}" + ("" if s.parsed else " · unparsed")
                )
                show_text(s.argument, language="sql" if s.action == "QUERY" else None)
                if s.error is not None:
                    show_error(s.error)


notices = header("Training", copy_link=True)
runs = [r for r in data.list_runs() if r.kind == "training"]
if not runs:
    st.info(NO_RUNS)
    st.stop()
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
_settings(chosen_run)
live = chosen_run.status in lifecycle.ACTIVE
if live:
    st.caption(f"Live: refreshes every {LIVE_SECONDS:.0f} s while the run trains.")
st.fragment(run_every=LIVE_SECONDS if live else None)(_curves)(run_id)
_question(chosen_run)
params.show_notices(notices)
