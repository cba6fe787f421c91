"""Compare: two or more runs (or training steps of a run) on the questions they share, overall
and question by question."""

from __future__ import annotations

import streamlit as st

from app.dashboard.compare import reads, side_by_side, stats
from app.dashboard.compare import summary as compare_summary
from app.dashboard.components import agents, nav, params, run_list, sides
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import watch_for_new_runs
from app.dashboard.components.params import Codec
from app.dashboard.components.render import MISSING
from app.dashboard.failures import mix as failure_mix
from app.dashboard.runs.reads import run_distributions
from storage.read_models import QuestionComparison, RunKey, RunStep, RunSummary

_RUNS = "cmp_runs"
_QUESTION = "cmp_question"


def _new_runs(run_ids: list[RunKey]) -> None:
    # Other runs, other questions: the picker goes back to its default, samples to the first.
    params.forget(_QUESTION, nav.P_QUESTION)
    side_by_side.forget_samples(run_ids)


def _question_codec(rows: list[QuestionComparison], default: str) -> Codec[str]:
    return params.choice(
        nav.P_QUESTION, [r.question_id for r in rows], default, "a question these runs played"
    )


def _open_question(question_id: str, codec: Codec[str], run_ids: list[RunKey]) -> None:
    params.assign(_QUESTION, nav.P_QUESTION, codec, question_id)
    side_by_side.forget_samples(run_ids)
    st.toast(f"Question {question_id} is shown side by side below.", icon=":material/south:")


notices = header("Compare", copy_link=True)
params.expect(nav.P_RUN, nav.P_QUESTION, nav.P_SAMPLE)
all_runs = run_list.offered()
by_id = {r.id: r for r in all_runs}
steps = sides.steps_of(all_runs)
offered = sides.options(all_runs, steps)
if len(offered) < 2:
    st.info(
        "Compare needs two runs, or a training run of two steps - record them with "
        "`rollscope run ...` first."
    )
    watch_for_new_runs(all_runs[0].id if all_runs else None)  # shown once recorded
    st.stop()
run_codec = sides.codec(nav.P_RUN, offered, by_id, sides.MOST_COMPARED)
with st.container(horizontal=True, vertical_alignment="bottom", gap="small"):
    chosen_ids: list[RunKey] = st.multiselect(
        "Runs, or training steps of a run (the first is the baseline)",
        offered,
        format_func=lambda k: sides.name_of(k, by_id),
        max_selections=sides.MOST_COMPARED,
        # Enter on a search would choose every match: "step 1" is dozens of steps.
        select_all=False,
        help="A training step (`name @ step 200`) compares that step's episodes alone: an "
        "evaluation run each few steps on the same questions compares checkpoint with "
        "checkpoint.",
        **params.bind(_RUNS, nav.P_RUN, run_codec, on_change=lambda: _new_runs(offered)),
    )
    if len(chosen_ids) == 2:
        st.button(
            "Swap A and B",
            icon=":material/swap_horiz:",
            on_click=params.assign,
            args=(_RUNS, nav.P_RUN, run_codec, chosen_ids[::-1]),
            help=f"Make {sides.name_of(chosen_ids[1], by_id)} the baseline",
        )
if len(chosen_ids) < 2:
    params.show_notices(notices)
    st.info("Choose two or more runs, or two training steps of one run.")
    st.stop()


def _side(key: RunKey) -> RunSummary:
    """A chosen run, or a run with the figures of one of its training steps."""
    if isinstance(key, RunStep):
        at = reads.run_at_step(key.run_id, key.train_step)
        if at is None:  # deleted since the list of runs was read
            st.info(f"Run {key.run_id} is no longer in this store; reload the page.")
            st.stop()
        return at
    return by_id[key]


runs = [_side(k) for k in chosen_ids]
outcomes, ids_apart = reads.compare_outcomes(tuple(chosen_ids))
# An id that asks another question in a run than in the baseline is not a question both
# played: that run's cell of it is left out of everything the page pairs.
paired = stats.leave_apart(outcomes, ids_apart)
rows, capped = reads.compare_all(tuple(chosen_ids))
rows = stats.shared_first(stats.leave_apart(rows, ids_apart), chosen_ids)
# One pairing per run: its card's accuracy and delta and its interval are the same numbers.
pairings = {r.key: stats.pairing(paired, runs[0].key, r.key) for r in runs[1:]}
compare_summary.headline(runs, outcomes, pairings)
compare_summary.ids_apart(ids_apart, runs)
agents.show(runs)
compare_summary.played_again(runs, by_id)
if capped:
    st.caption(
        f"The statistics cover all {len(outcomes):,} questions; the lists and the question picker "
        f"the first {reads.QUESTION_CAP:,}."
    )
for other in runs[1:]:
    compare_summary.interval(pairings[other.key], runs[0], other)
compare_summary.pooled_steps(runs, steps)

differing = [r.question_id for r in rows if stats.runs_differ(r, chosen_ids)]
compared = sum(stats.played_by(r, chosen_ids) >= 2 for r in rows)
codec = _question_codec(rows, differing[0] if differing else rows[0].question_id if rows else "")


def open_question(question_id: str) -> None:
    """Show a question side by side (from a click in a question list)."""
    _open_question(question_id, codec, chosen_ids)


if len(runs) == 2:
    compare_summary.matrix(
        paired, {r.question_id: r for r in rows}, runs[0], runs[1], open_question
    )
    dist_a, dist_b, what = compare_summary.class_counts(
        runs[0], runs[1], run_distributions(tuple(chosen_ids)), pairings[runs[1].key], paired
    )
    failure_mix.show_shift(dist_a, dist_b, runs[0], runs[1], what)
else:
    st.subheader("Per-question success rate")
    unplayed = any(run.key not in r.cells for r in rows for run in runs)
    st.caption(
        f"{stats.DIFFERS_LEGEND}. The questions all the runs played come first; select one "
        "to see it side by side below."
        + (f" A run's cell reads {MISSING} where it did not play the question." if unplayed else "")
    )
    compare_summary.clickable_questions(
        rows, runs, key="cmp_all_questions", open_question=open_question
    )

by_question = {r.question_id: r for r in rows}
# Side by side needs a question two runs played: one run's episodes alone compare nothing.
if compared:
    st.subheader("Question side by side")
    marked = set(differing)
    qid = st.selectbox(
        f"Question ({len(differing):,} of the {compared:,} "
        + ("shared questions" if len(runs) == 2 else "questions two or more runs played")
        + f" differ; {stats.DIFFERS_LEGEND})",
        list(by_question),
        format_func=lambda q: f"{'≠ ' if q in marked else ''}{q} · {by_question[q].question[:80]}",
        **params.bind(
            _QUESTION,
            nav.P_QUESTION,
            codec,
            on_change=lambda: side_by_side.forget_samples(chosen_ids),
        ),
    )
    shown = reads.compare_question(tuple(chosen_ids), qid) or by_question[qid]
    side_by_side.show(stats.leave_apart([shown], ids_apart)[0], runs)
params.show_notices(notices)
