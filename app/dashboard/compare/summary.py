"""Compare's summary: each run against the baseline on the questions they share, the paired
interval, and the outcome matrix whose cells open a question side by side."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import streamlit as st

from app.dashboard import analysis
from app.dashboard.compare import reads, stats
from app.dashboard.compare.stats import MIN_CI_QUESTIONS, Pairing
from app.dashboard.components import ids_apart as ids_apart_warning
from app.dashboard.components.colors import swatch
from app.dashboard.components.render import MISSING, escape_markdown, fmt_points
from app.dashboard.training import reads as training_reads
from app.plural import counted
from app.render import fmt_num, fmt_pct, fmt_signed
from storage.read_models import (
    Distribution,
    IdApart,
    QuestionComparison,
    QuestionOutcomes,
    RunKey,
    RunSummary,
)

LIST_CAP = 200
"""Questions listed per outcome cell; the counts are always complete."""
_UNCHANGED = 0.0005
OpenQuestion = Callable[[str], None]
"""Shows a question side by side (a widget callback)."""


def run_label(run: RunSummary) -> str:
    """A run's name in markdown, after a dot in its colour (and the training step its
    figures are of, for one step of a run)."""
    step = "" if run.train_step is None else f" · step {run.train_step}"
    return f"{swatch(run.id)} **{escape_markdown(run.name)}** #{run.id}{step}"


def _metric(
    label: str, value: str, delta: float | None, fmt: Callable[[float], str], *, lower: bool
) -> None:
    # Fewer steps and fewer parse failures are better; no change is neither.
    unchanged = delta is not None and abs(delta) < _UNCHANGED
    st.metric(
        label,
        value,
        delta=None if delta is None else fmt(0.0 if unchanged else delta),
        delta_color="off" if unchanged else "inverse" if lower else "normal",
        delta_arrow="off" if unchanged else "auto",
        width=160,
    )


def headline(
    runs: Sequence[RunSummary],
    outcomes: Sequence[QuestionOutcomes],
    pairings: Mapping[RunKey, Pairing],
) -> None:
    """One wrapping row of metrics per run. Accuracy is over the questions a run shares with
    the baseline, the baseline's over the same ones (whole-run figures under them); the other
    deltas show only when both played the same questions."""
    base = runs[0]
    played = {run.key: sum(stats.played_by(r, [run.key]) for r in outcomes) for run in runs}
    shared = [p for p in pairings.values() if p.questions]
    # Every run shares the same questions with the baseline: the baseline's card shows its
    # accuracy on them; otherwise each run's card names the baseline's on its own.
    common = shared[0] if len({p.question_ids for p in shared}) == 1 else None
    own_reward = (
        " Mean reward is each run's own: rollscope's environment's for a run it played, the "
        "trainer's or the file's for one it did not; the same answers can score differently."
        if len({run.played_here for run in runs}) > 1
        else ""
    )
    st.caption(
        f"Deltas against the baseline {escape_markdown(base.label)} (#{base.id}), on the "
        "questions each run shares with it. Accuracy: the mean success rate per question on "
        f"them, a question counting once however many samples it has.{own_reward}"
    )
    for run in runs:
        # The name above its metrics, not beside them: four 160 px metrics then fit one line of
        # an 800 px window (with the name beside them, two wrapped under the name).
        st.markdown(run_label(run))
        with st.container(horizontal=True, gap="small", vertical_alignment="center"):
            if run is base:
                _base_metrics(run, common, played[run.key])
            elif pairings[run.key].questions == 0:
                st.caption("shares no questions with the baseline: no deltas")
            else:
                # The same questions: every one each played is paired (no id apart either).
                pair = pairings[run.key]
                same = pair.questions == played[base.key] == played[run.key]
                _run_metrics(base, run, pair, played[run.key], same, common is None)


def ids_apart(apart: Sequence[IdApart], runs: Sequence[RunSummary]) -> None:
    """Say, for each two sides, which question ids they share but ask different questions
    under, left out of the pairing."""
    by_key = {run.key: run for run in runs}
    ids_apart_warning.show(apart, lambda k: by_key[k].label, lambda k: column(by_key[k]))


def _base_metrics(base: RunSummary, common: Pairing | None, played: int) -> None:
    if common is None:
        title = f"accuracy (whole {_what(base)})"
        _metric(title, fmt_pct(base.accuracy), None, fmt_points, lower=False)
    else:
        _metric(
            f"accuracy ({common.questions:,} shared)",
            fmt_pct(common.base),
            None,
            fmt_points,
            lower=False,
        )
    for label, value, lower in _others(base):
        _metric(label, value, None, fmt_signed, lower=lower)
    if common is not None and (whole := _whole_run(base, common.base, played, common.questions)):
        st.caption(whole)


def _run_metrics(
    base: RunSummary, run: RunSummary, pair: Pairing, played: int, same: bool, name_base: bool
) -> None:
    _metric(
        f"accuracy ({pair.questions:,} shared)",
        fmt_pct(pair.run),
        pair.delta,
        fmt_points,
        lower=False,
    )
    for (label, value, lower), (ref, val) in zip(_others(run), _pairs(base, run), strict=True):
        delta = None if not same or ref is None or val is None else val - ref
        fmt = fmt_points if label == "parse failures" else fmt_signed
        _metric(label, value, delta, fmt, lower=lower)
    notes = []
    if name_base:
        notes.append(
            f"{escape_markdown(base.label)}: {fmt_pct(pair.base)} on the same {pair.questions:,}"
        )
    if whole := _whole_run(run, pair.run, played, pair.questions):
        notes.append(whole)
    if not same:
        notes.append(
            f"reward, steps, parse failures: whole {_what(run)}s, other questions: no deltas"
        )
    if notes:
        st.caption("  \n".join(notes))


def _whole_run(run: RunSummary, shown: float | None, played: int, shared: int) -> str | None:
    """The run's accuracy over all its episodes, where it is not the figure shown."""
    if played == shared and fmt_pct(run.accuracy) == fmt_pct(shown):
        return None
    return (
        f"whole {_what(run)}: {fmt_pct(run.accuracy)} of its "
        f"{counted(run.episodes_finished, 'episode')} on {counted(played, 'question')}"
    )


def _what(run: RunSummary) -> str:
    """What a side's own figures cover: its run, or one training step of it."""
    return "run" if run.train_step is None else "step"


def _others(run: RunSummary) -> list[tuple[str, str, bool]]:
    return [
        ("mean reward", fmt_num(run.mean_reward, 3), False),
        ("mean steps", fmt_num(run.mean_steps), True),
        ("parse failures", fmt_pct(run.parse_failure_rate), True),
    ]


def _pairs(base: RunSummary, run: RunSummary) -> list[tuple[float | None, float | None]]:
    return [
        (base.mean_reward, run.mean_reward),
        (base.mean_steps, run.mean_steps),
        (base.parse_failure_rate, run.parse_failure_rate),
    ]


def interval(pair: Pairing, a: RunSummary, b: RunSummary) -> None:
    """The paired-bootstrap interval of b's accuracy minus a's, over their shared questions;
    below `MIN_CI_QUESTIONS` the difference alone, said to rest on too few questions."""
    ci = pair.interval
    if ci is None:
        st.info(
            f"{a.label} and {b.label} share no questions: no accuracy difference to show.",
            icon=":material/block:",
        )
        return
    names = f"{escape_markdown(b.label)} − {escape_markdown(a.label)}"
    over = f"the {counted(ci.n, 'question')} both played"
    if ci.n < MIN_CI_QUESTIONS:
        st.markdown(
            f"Accuracy {names}: **{fmt_points(ci.diff)}** over {over}: too few questions for "
            f"a confidence interval (it needs {MIN_CI_QUESTIONS} or more)."
        )
        return
    st.markdown(
        f"Accuracy {names}: **{fmt_points(ci.diff)}** (95% CI {fmt_points(ci.low)} to "
        f"{fmt_points(ci.high)}, paired bootstrap over {over}, "
        f"{analysis.BOOTSTRAP_RESAMPLES:,} resamples)"
    )


def pooled_steps(runs: Sequence[RunSummary], steps: Mapping[int, Sequence[int]]) -> None:
    """Say that a training run's (or an import's) episodes of every training step count here:
    a run that learned shows its mean over the steps, not its last step; one step of it can
    be compared instead."""
    pooled = [r for r in runs if r.train_step is None and len(steps.get(r.id, ())) > 1]
    if pooled:
        names = ", ".join(escape_markdown(r.name) for r in pooled)
        first = pooled[0]
        st.caption(
            f"{names}: every episode counts here, from every training step the run holds, so "
            "a run that learned shows its mean over the steps. To compare one step's episodes, "
            f"choose it above ({escape_markdown(first.name)} (#{first.id}) @ step "
            f"{steps[first.id][-1]}); Training shows the run step by step."
        )


def played_again(runs: Sequence[RunSummary], by_id: Mapping[int, RunSummary]) -> None:
    """Say which training-step sides leave out an earlier play of their step (a step file a
    resumed trainer rewrote), and how many episodes."""
    for side in runs:
        run = by_id.get(side.id)
        if side.train_step is None or run is None or run.source_format is None:
            continue
        again = training_reads.played_again(run.id, training_reads.progress_of(run))
        if left := again.by_step.get(side.train_step):
            st.caption(
                f"{escape_markdown(side.label)}: the step as its rewritten file holds it now; "
                f"{counted(left, 'episode')} of an earlier play of it left out (a trainer "
                "resumed from a checkpoint played the step again)."
            )


def column(run: RunSummary) -> str:
    """A run's column in a question table: its name and id, and its training step if any."""
    step = "" if run.train_step is None else f" @ step {run.train_step}"
    return f"{run.name} #{run.id}{step}"


def question_table(rows: Sequence[QuestionComparison], runs: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per question: id, database, text, and each run's success rate."""
    records = []
    for r in rows:
        rec: dict[str, object] = {
            "question id": r.question_id,
            "differs": "≠" if stats.runs_differ(r, [run.key for run in runs]) else "",
            "database": r.db_id,
            "question": r.question,
        }
        for run in runs:
            cell = r.cells.get(run.key)
            rec[column(run)] = None if cell is None else cell.success_rate
        records.append(rec)
    columns = ["question id", "differs", "database", "question"]
    return pd.DataFrame(records, columns=columns + [column(run) for run in runs])


def clickable_questions(
    rows: Sequence[QuestionComparison],
    runs: Sequence[RunSummary],
    *,
    key: str,
    open_question: OpenQuestion,
) -> None:
    """A question table; selecting a row shows that question side by side."""
    shown = list(rows[:LIST_CAP])

    def picked() -> None:
        chosen = st.session_state[key].selection.rows
        if chosen and chosen[0] < len(shown):
            open_question(shown[chosen[0]].question_id)

    st.dataframe(
        question_table(shown, runs),
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        on_select=picked,
        selection_mode="single-row",
        key=key,
        column_config={column(run): st.column_config.NumberColumn(format="percent") for run in runs}
        | {"question": st.column_config.TextColumn(width="large")},
    )
    if len(rows) > LIST_CAP:
        st.caption(f"The first {LIST_CAP} of {len(rows):,} questions.")


def matrix(
    outcomes: Sequence[QuestionOutcomes],
    listed: dict[str, QuestionComparison],
    a: RunSummary,
    b: RunSummary,
    open_question: OpenQuestion,
) -> None:
    """The four outcome counts over the shared questions; each cell lists its questions, and
    a click on one opens it side by side."""
    st.subheader("Per-question outcomes")
    cells = analysis.outcome_matrix(outcomes, a.key, b.key)
    shared = sum(len(v) for v in cells.values())
    if shared == 0:
        st.info(f"{a.label} and {b.label} share no questions.", icon=":material/block:")
        return
    caption = f"Over the {counted(shared, 'question')} both runs played."
    if any(c.episodes > 1 for r in outcomes for c in r.cells.values()):
        caption += " Several samples per question: a run solves one with half or more correct."
    st.caption(caption + " Select a question in a list to see it side by side below.")
    grid = pd.DataFrame(
        [
            [len(cells["both right"]), len(cells["only B"])],
            [len(cells["only A"]), len(cells["both wrong"])],
        ],
        index=[f"{b.label} right", f"{b.label} wrong"],
        columns=[f"{a.label} right", f"{a.label} wrong"],
    )
    st.dataframe(grid, placeholder=MISSING)
    for cell in analysis.CELLS:
        label = cell.replace(" A", f" {a.label}").replace(" B", f" {b.label}")
        rows = [listed[o.question_id] for o in cells[cell] if o.question_id in listed]
        with st.expander(f"{label}: {len(cells[cell]):,}", expanded=cell in ("only A", "only B")):
            clickable_questions(
                rows, [a, b], key=f"cmp_cell_{cell.replace(' ', '_')}", open_question=open_question
            )


def class_counts(
    a: RunSummary,
    b: RunSummary,
    whole: Sequence[Distribution],
    pair: Pairing,
    outcomes: Sequence[QuestionOutcomes],
) -> tuple[Distribution, Distribution, str]:
    """The two sides' failure-class counts over the questions the cards cover (those both
    played), and a line saying what they cover. `whole`: the sides' whole counts: the same
    where both played the same questions, and shown, said so, where they share none."""
    dist_a, dist_b = whole
    shared = counted(pair.questions, "question")
    if pair.questions == 0:
        return dist_a, dist_b, NO_SHARED_CLASSES
    if analysis.same_questions(outcomes, a.key, b.key):
        return dist_a, dist_b, f"Over the {shared} both played, every episode of each."
    ids = tuple(sorted(pair.question_ids))
    dist_a = dataclasses.replace(dist_a, failure_counts=reads.failure_counts_on(dist_a.key, ids))
    dist_b = dataclasses.replace(dist_b, failure_counts=reads.failure_counts_on(dist_b.key, ids))
    n_a, n_b = sum(dist_a.failure_counts.values()), sum(dist_b.failure_counts.values())
    name_a, name_b = escape_markdown(a.label), escape_markdown(b.label)
    what = (
        f"Over the {shared} both played, as the cards above: {n_a:,} of {name_a}'s "
        f"{a.episodes_finished:,} episodes and {n_b:,} of {name_b}'s {b.episodes_finished:,} "
        "(a question counts once per sample here). The episodes links open a side's episodes "
        "of the class on all its questions."
    )
    return dist_a, dist_b, what


NO_SHARED_CLASSES = (
    "Each run's shares are over its own questions, and these runs share none: the change "
    "compares different questions, not the same ones answered better or worse."
)
