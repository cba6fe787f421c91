"""The Training page's sections: the trainer's settings, the curves, the questions that
flipped, and one question across training."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from app.dashboard import analysis, data
from app.dashboard.analysis import SOLVED_RATE
from app.dashboard.components import browser, nav, params
from app.dashboard.components.outcome import outcome_label
from app.dashboard.components.render import (
    MISSING,
    escape_markdown,
    show_step_action,
    show_step_result,
)
from app.dashboard.training import charts, reads
from app.dashboard.training.curves import (
    Curves,
    adds_to_reward,
    at_step,
    shown_steps,
    step_ranges,
    steps_of_points,
)
from app.dashboard.training.flips import QuestionFlip
from app.plural import counted
from app.render import fmt_num, fmt_pct
from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from storage.read_models import EpisodeDetail, RunSummary
from storage.training import PlayedAgain, TrainingEpisode

_OPEN_FLIP = "tr_open_flip"
_TOLD_EMPTY = "tr_told_empty"
"""The last dragged range that held no point, told once."""


TRL_STEPS = (
    "Training steps as TRL numbers its completions files: step N holds the rollouts behind "
    "optimizer step N, which rollscope's own recording of the same training files under "
    "step N − 1."
)


def _evaluation_of(run: RunSummary) -> str | None:
    """The training run `run` evaluates, as its spec names it."""
    named = run.spec.get("evaluation_of") if isinstance(run.spec, dict) else None
    return named if isinstance(named, str) else None


def settings_caption(run: RunSummary) -> None:
    """The trainer's settings in one line, when the run recorded them; for an import of TRL's
    completions files, how they number the steps."""
    try:
        training = RunSpec.from_stored(run.spec).training
    except SpecError:
        training = None
    if training is None:
        if run.source_format == "trl":
            # Beside rollscope's recording of the same training, its curves sit a step apart.
            st.caption(TRL_STEPS)
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


def evaluation_link(run: RunSummary, runs: Sequence[RunSummary]) -> None:
    """Between a training run and the run of its trainer's evaluation rollouts, whichever is
    shown: a line saying what an evaluation run is, and a link to the other."""
    evaluated = _evaluation_of(run)
    if evaluated is not None:
        st.caption(
            escape_markdown(
                f"The evaluation rollouts of training run {evaluated}: each step is an "
                "evaluation of the weights trained that many steps, on the same questions."
            )
        )
        other = next((r for r in runs if r.name == evaluated), None)
        label = f"Training run {evaluated}"
    else:
        other = next((r for r in runs if _evaluation_of(r) == run.name), None)
        label = f"Its evaluation: {other.name}" if other else ""
    if other is not None:
        # A button that rewrites the query, not a page link: a link to this same page showed
        # the other run and left the browser's URL (and Copy link) on this one.
        st.button(
            escape_markdown(label),
            icon=":material/fact_check:",
            type="tertiary",
            on_click=_open_run,
            args=(other.id,),
            key="tr_other_run",
        )


def _open_run(run_id: int) -> None:
    """Show another training run, its default question."""
    params.write(nav.P_RUN, [str(run_id)])
    params.forget("tr_question", nav.P_QUESTION)


def _why_no_steps(run: RunSummary) -> str:
    """Why a run of a training kind has no training step, by where its episodes came from."""
    if run.kind == "env":
        return "its clients reset without `train_step` (docs/env-server.md)"
    if run.kind == "import":
        return "its files do not write one"
    return "they were recorded without `step=`"


def curves(run_id: int) -> None:
    """The run's numbers and curves, read again at each call (a live run's fragment)."""
    run = data.get_run_uncached(run_id)
    if run is None:  # deleted since the page listed it
        st.info("This run is no longer in the store.")
        return
    view = reads.steps_view(run.id, reads.progress_of(run))
    found = view.curves
    last = found.last
    # A wrapping row: at 800 px five fixed columns cut every value to "co…".
    with st.container(horizontal=True, gap="medium"):
        st.metric("status", run.status, width="content")
        st.metric("episodes", f"{run.episodes_finished:,}", width="content")
        st.metric("training steps", f"{found.steps:,}", width="content")
        st.metric("accuracy (last step)", fmt_pct(last.accuracy if last else None), width="content")
        st.metric("reward (last step)", fmt_num(last.reward if last else None, 3), width="content")
    if not found.steps:
        st.info(
            f"This run's episodes carry no training step: {_why_no_steps(run)}. Its episodes "
            "are on Episodes and GRPO groups."
            if run.episodes_finished
            else "No finished episodes yet."
        )
        return
    if (again := reads.played_again(run.id, reads.progress_of(run))).episodes:
        st.caption(played_again_text(again))
    if found.per_point > 1:
        st.caption(
            f"{found.steps:,} training steps: each point is the mean of {found.per_point} "
            "consecutive steps (weighted by their episodes, or groups for the group metrics)."
        )
    clickable = charts.marked(found)
    st.caption(
        "Hover a point for the questions its step drew: a step's numbers move with which "
        "questions it drew as much as with what the model learned. "
        + (
            "Click a point to open its episodes, or pick the box select tool and drag across steps."
            if clickable
            else "Drag across steps to open their episodes."
        )
    )
    drawn = [c for c in charts.CHARTS if charts.has_values(found, c)]
    left = [c.title.lower() for c in charts.CHARTS if c not in drawn]
    if not view.rewards:
        left.insert(0, "rewards by name")
    if left:
        st.caption(f"Not drawn, as this run's records hold none: {', '.join(left)}.")
    imported = run.source_format is not None
    figures = [
        (
            charts.figure(found, c),
            _notes(
                (imported and c.imported_note) or c.note,
                charts.undrawn_note(found, charts.series_values(found, c)),
            ),
        )
        for c in drawn
    ]
    figures.insert(3, (charts.signal_figure(found), charts.SIGNAL_NOTE))
    if adds_to_reward(found, view.rewards):  # beside the reward: the parts a trainer logs
        named = charts.named_rewards_figure(found, view.rewards)
        lines = charts.drawn_rewards(view.rewards)
        note = _notes(
            charts.named_rewards_note(len(view.rewards)), charts.undrawn_note(found, lines)
        )
        figures.insert(2, (named, note))
    # A row of two at a time: the notes under the charts differ in length, and two tall
    # columns let the charts beside each other drift apart.
    for start in range(0, len(figures), 2):
        for col, (i, (fig, note)) in zip(
            st.columns(2), enumerate(figures[start : start + 2], start), strict=False
        ):
            with col:
                st.plotly_chart(
                    fig,
                    width="stretch",
                    key=f"tr_{i}",
                    on_select="rerun",
                    selection_mode=("points", "box") if clickable else "box",
                )
                if note:
                    st.caption(note)
    _open_picked_steps(run.id, found, [f"tr_{i}" for i in range(len(figures))])


def _notes(*notes: str) -> str:
    """A chart's notes in one caption, the empty ones left out."""
    return " ".join(n for n in notes if n)


def played_again_text(again: PlayedAgain) -> str:
    """What the page leaves out of a run whose steps were played again, in a line."""
    steps = step_ranges(again.steps)
    return (
        f"Left out: {counted(again.episodes, 'episode')} of earlier plays of training "
        f"step{'s' if len(again.steps) != 1 else ''} {steps}, which a later play replaced "
        "(a trainer resumed from a checkpoint plays the steps after it again). The page shows "
        "those steps as last played; Episodes and GRPO groups keep both plays, the earlier one "
        "marked replaced."
    )


def _open_picked_steps(run_id: int, found: Curves, keys: list[str]) -> None:
    """A click on a chart's point, or a range dragged across a chart, opens Episodes on the
    training steps of the points picked."""
    for key in keys:
        state = st.session_state.get(key)
        if state is None:
            continue
        # A drag also selects the points in its range: its box says the range whole.
        picked = state.selection.box or state.selection.points
        if picked and "x" in picked[0]:
            break
    else:
        return
    x = picked[0]["x"]
    low, high = (x, x) if isinstance(x, int | float) else (min(x), max(x))
    steps = steps_of_points(found, low, high)
    if steps is None:
        # Once a range: a live run's curves rerun every few seconds, with the range still
        # selected. A clicked point that is gone (the run has moved on) says nothing.
        if low != high and st.session_state.get(_TOLD_EMPTY) != (low, high):
            st.session_state[_TOLD_EMPTY] = (low, high)
            st.toast(
                f"No point between steps {low:.0f} and {high:.0f}: drag across a point.",
                icon=":material/info:",
            )
        return
    first, last = steps
    which = f"step {last}" if first == last else f"steps {first}-{last}"
    browser.go(
        "tr_step_link",
        nav.EPISODES,
        [(nav.P_RUN, str(run_id)), (nav.P_TRAIN_FROM, str(first)), (nav.P_TRAIN_TO, str(last))],
        f"Opening the episodes of {which}...",
    )


def _open_flip(question_ids: list[str]) -> None:
    """A flip's "open": the question's episodes below, at its first and last steps."""
    click = st.session_state.get(_OPEN_FLIP)
    if click is not None and 0 <= click["row"] < len(question_ids):
        params.write(nav.P_QUESTION, [question_ids[click["row"]]])


def _flip_row(kind: str, f: QuestionFlip) -> dict[str, object]:
    return {
        "open": ":material/arrow_downward: open",
        "flip": kind,
        "question id": f.question_id,
        "first step": f.first_step,
        "correct at first": f"{f.first_correct}/{f.first_samples}",
        "last step": f.last_step,
        "correct at last": f"{f.last_correct}/{f.last_samples}",
        "question": f.question,
    }


def _has_steps(run: RunSummary) -> bool:
    """Whether any of the run's episodes carries a training step (`curves` says when none)."""
    return reads.steps_view(run.id, reads.progress_of(run)).curves.steps > 0


def flips(run: RunSummary) -> None:
    """The questions whose result changed between the first and the last step that drew them."""
    if not _has_steps(run):
        return
    st.subheader("Questions that flipped during training")
    found = reads.steps_view(run.id, reads.progress_of(run)).flips
    st.caption(
        "Each question at the first and at the last training step that drew it, right when "
        f"at least {SOLVED_RATE:.0%} of its samples there were correct. **open** shows its "
        "episodes at both steps side by side, below."
    )
    with st.container(horizontal=True, gap="medium"):
        st.metric("right → wrong", f"{len(found.to_wrong):,}", width="content")
        st.metric("wrong → right", f"{len(found.to_right):,}", width="content")
        st.metric("drawn at two steps or more", f"{found.questions:,}", width="content")
    _step_links(run.id)
    listed = [("right → wrong", f) for f in found.to_wrong]
    listed += [("wrong → right", f) for f in found.to_right]
    if not listed:
        what = "No question" if found.questions else "No question was drawn twice, so none"
        st.info(f"{what} flipped between the first and the last step that drew it.")
        return
    st.dataframe(
        pd.DataFrame([_flip_row(kind, f) for kind, f in listed]),
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        key="tr_flips",
        column_config={
            "open": st.column_config.ButtonColumn(
                "",
                type="tertiary",
                on_click=_open_flip,
                args=([f.question_id for _, f in listed],),
                key=_OPEN_FLIP,
                pinned=True,
            ),
            "question": st.column_config.TextColumn(width="medium"),
        },
    )


MAP_STEPS = 10
"""Training steps the link to the Question map names at most (evenly spaced, the first and
the last among them): more columns than a narrow window can label."""


def _step_links(run_id: int) -> None:
    """Compare, with the run's first training step against its last, and the Question map of
    its steps: each step a checkpoint of its own."""
    steps = data.finished_steps(run_id)
    if len(steps) < 2:
        return
    first, last = steps[0], steps[-1]
    with st.container(horizontal=True, gap="medium"):
        st.page_link(
            nav.COMPARE,
            label=f"Compare step {first} with step {last}",
            icon=":material/compare:",
            query_params=[(nav.P_RUN, f"{run_id}@{first}"), (nav.P_RUN, f"{run_id}@{last}")],
        )
        shown = spaced(steps, MAP_STEPS)
        which = f"its {len(steps)}" if len(shown) == len(steps) else f"{len(shown)} of its"
        st.page_link(
            nav.MAP,
            label=f"Question map of {which} steps",
            icon=":material/grid_on:",
            query_params=[(nav.P_RUN, f"{run_id}@{s}") for s in shown],
        )


def spaced(steps: list[int], most: int) -> list[int]:
    """Up to `most` of the steps, evenly spaced, the first and the last among them."""
    if len(steps) <= most:
        return steps
    return [steps[round(i * (len(steps) - 1) / (most - 1))] for i in range(most)]


def question(run: RunSummary) -> None:
    """One question's episodes at its first, a middle and its last training step."""
    if not _has_steps(run):
        if asked := params.get_str(nav.P_QUESTION):
            params.notice(
                f"{nav.P_QUESTION}={asked!r} in the link: this run's episodes carry no training "
                "step, so no question is shown across training (its episodes are on Episodes)."
            )
        return
    st.subheader("One question across training")
    progress = reads.progress_of(run)
    questions = reads.questions(run.id, progress)
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
    shown = shown_steps(reads.played_steps(run.id, qid, progress))
    episodes = reads.question_episodes(run.id, qid, tuple(shown), progress)
    chosen: list[tuple[int, list[TrainingEpisode], EpisodeDetail]] = []
    for step in shown:
        group = at_step(episodes, step)
        labels = {e.id: f"sample {e.sample_index}: {outcome_label(e.outcome)}" for e in group}
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
    if chosen:
        _side_by_side(chosen)


def _side_by_side(chosen: list[tuple[int, list[TrainingEpisode], EpisodeDetail]]) -> None:
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
            f"**Training step {step}**: {outcome_label(detail.summary.outcome)}, reward "
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
                show_step_action(s)
                show_step_result(s)
