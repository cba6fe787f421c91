"""Compare: two or more runs on the questions they share, overall and question by question."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import analysis, data
from app.dashboard.components import failure_mix, nav, params
from app.dashboard.components.confidence import confidence_chart, has_confidence
from app.dashboard.components.render import (
    escape_markdown,
    fmt_num,
    fmt_pct,
    fmt_signed,
    show_error,
    show_text,
)
from storage.read_models import EpisodeDetail, QuestionComparison, QuestionOutcomes, RunSummary

_LIST_CAP = 200  # questions listed per outcome cell; the counts are always complete


def _headline(runs: list[RunSummary]) -> None:
    base = runs[0]
    st.caption(f"Deltas against {base.name} (#{base.id}).")
    for run in runs:
        cols = st.columns(5)
        cols[0].markdown(f"**{escape_markdown(run.name)}** #{run.id}")
        for col, label, value, ref, fmt in (
            (cols[1], "accuracy", run.accuracy, base.accuracy, fmt_pct),
            (cols[2], "mean reward", run.mean_reward, base.mean_reward, fmt_num),
            (cols[3], "mean steps", run.mean_steps, base.mean_steps, fmt_num),
            (cols[4], "parse failures", run.parse_failure_rate, base.parse_failure_rate, fmt_pct),
        ):
            delta = None if run is base or value is None or ref is None else value - ref
            # Fewer steps and fewer parse failures are better; no change is neither.
            better_lower = label in ("mean steps", "parse failures")
            unchanged = delta is not None and abs(delta) < 0.0005
            col.metric(
                label,
                fmt(value),
                delta=None if delta is None else ("0.000" if unchanged else fmt_signed(delta)),
                delta_color="off" if unchanged else "inverse" if better_lower else "normal",
                delta_arrow="off" if unchanged else "auto",
            )


def _interval(rows: list[QuestionOutcomes], a: RunSummary, b: RunSummary) -> None:
    _, ra, rb = analysis.paired_questions(rows, a.id, b.id)
    ci = analysis.bootstrap_accuracy_diff(ra, rb)
    if ci is None:
        st.info(f"{a.name} and {b.name} share no questions.")
        return
    st.markdown(
        f"Accuracy {escape_markdown(b.name)} − {escape_markdown(a.name)}: **{ci.diff:+.3f}** "
        f"(95% CI {ci.low:+.3f} to {ci.high:+.3f}, paired bootstrap over {ci.n} questions, "
        f"{analysis.BOOTSTRAP_RESAMPLES} resamples)"
    )


def _matrix(
    outcomes: list[QuestionOutcomes],
    listed: dict[str, QuestionComparison],
    a: RunSummary,
    b: RunSummary,
) -> None:
    """The four outcome counts over every question; each cell lists the questions loaded."""
    cells = analysis.outcome_matrix(outcomes, a.id, b.id)
    st.subheader("Per-question outcomes")
    multi = any(c.episodes > 1 for r in outcomes for c in r.cells.values())
    if multi:
        st.caption(
            "Several samples per question: a run solves a question with half or more correct."
        )
    grid = pd.DataFrame(
        [
            [len(cells["both right"]), len(cells["only B"])],
            [len(cells["only A"]), len(cells["both wrong"])],
        ],
        index=[f"{b.name} right", f"{b.name} wrong"],
        columns=[f"{a.name} right", f"{a.name} wrong"],
    )
    st.dataframe(grid)
    for cell in analysis.CELLS:
        label = cell.replace(" A", f" {a.name}").replace(" B", f" {b.name}")
        rows = [listed[o.question_id] for o in cells[cell] if o.question_id in listed]
        with st.expander(f"{label}: {len(cells[cell])}"):
            st.dataframe(_question_table(rows[:_LIST_CAP], [a, b]), hide_index=True)


def _question_table(rows: list[QuestionComparison], runs: list[RunSummary]) -> pd.DataFrame:
    records = []
    for r in rows:
        rec: dict[str, object] = {
            "question id": r.question_id,
            "database": r.db_id,
            "question": r.question,
        }
        for run in runs:
            cell = r.cells.get(run.id)
            rec[run.name] = None if cell is None else cell.success_rate
        rec["open"] = "compare?" + "&".join(
            [f"{nav.P_RUN}={run.id}" for run in runs] + [f"{nav.P_QUESTION}={r.question_id}"]
        )
        records.append(rec)
    return pd.DataFrame(records)


def _side_by_side(row: QuestionComparison, runs: list[RunSummary]) -> None:
    st.subheader("Question side by side")
    st.markdown(escape_markdown(row.question))
    details: list[tuple[RunSummary, EpisodeDetail]] = []
    for run in runs:
        cell = row.cells.get(run.id)
        if cell is None or not cell.episode_ids:
            continue
        if cell.episodes > 1:
            st.caption(f"{run.name}: {cell.correct}/{cell.episodes} samples correct")
        sample = 0
        if len(cell.episode_ids) > 1:
            sample = st.selectbox(
                f"Sample of {run.name}", range(len(cell.episode_ids)), key=f"cmp_sample_{run.id}"
            )
        detail = data.get_episode(cell.episode_ids[sample])
        if detail is not None:
            details.append((run, detail))
    if not details:
        st.info("None of these runs has an episode of this question.")
        return
    diverge = analysis.first_divergence([d.steps for _, d in details])
    if diverge is None:
        st.success("All trajectories take the same actions.")
    else:
        st.warning(f"First divergence at step {diverge + 1}.")
    heads = st.columns(len(details))
    for col, (run, detail) in zip(heads, details, strict=True):
        col.markdown(
            f"**{escape_markdown(run.name)}**: {detail.summary.outcome or 'playing'}, "
            f"reward {fmt_num(detail.summary.reward, 3)}"
        )
        with col:
            st.page_link(
                nav.REPLAY, label="Replay", query_params={nav.P_EPISODE: str(detail.summary.id)}
            )
    traced = [(f"{run.name} #{d.summary.sample_index}", d.steps) for run, d in details]
    if any(has_confidence(steps) for _, steps in traced):
        st.plotly_chart(confidence_chart(traced), width="stretch", key="cmp_confidence")
    longest = max(len(d.steps) for _, d in details)
    for i in range(longest):
        marker = " ◀ first divergence" if diverge == i else ""
        st.markdown(f"**Step {i + 1}**{marker}")
        cols = st.columns(len(details))
        for col, (_, detail) in zip(cols, details, strict=True):
            with col:
                if i >= len(detail.steps):
                    st.caption("(episode over)")
                    continue
                step = detail.steps[i]
                st.caption(
                    f"{step.action} · reward {step.reward:+.3f}"
                    + ("" if step.parsed else " · unparsed")
                )
                show_text(step.argument, language="sql" if step.action == "QUERY" else None)
                if step.error is not None:
                    show_error(step.error)


st.title("Compare")
all_runs = data.list_runs()
if len(all_runs) < 2:
    st.info("Compare needs two runs - record them with `rollscope run ...` first.")
    st.stop()

by_id = {r.id: r for r in all_runs}
wanted = params.get_ints(nav.P_RUN)
unknown = [i for i in wanted if i not in by_id]
if unknown:
    st.warning(f"Unknown run id(s) in the link: {', '.join(map(str, unknown))}; ignored.")
params.init_state("cmp_runs", [i for i in wanted if i in by_id])
chosen_ids: list[int] = st.multiselect(
    "Runs (the first is the baseline)",
    list(by_id),
    key="cmp_runs",
    format_func=lambda i: f"{by_id[i].name} (#{i})",
)
params.put(nav.P_RUN, chosen_ids)
if len(chosen_ids) < 2:
    st.info("Choose two or more runs.")
    st.stop()

runs = [by_id[i] for i in chosen_ids]
_headline(runs)
outcomes = data.compare_outcomes(chosen_ids)
rows, capped = data.compare_all(chosen_ids)
if capped:
    st.caption(
        f"The statistics cover all {len(outcomes)} questions; the lists and the question picker "
        f"the first {data.COMPARE_QUESTION_CAP}."
    )
for other in runs[1:]:
    _interval(outcomes, runs[0], other)
if len(runs) == 2:
    _matrix(outcomes, {r.question_id: r for r in rows}, runs[0], runs[1])
    dist_a, dist_b = data.run_distributions(chosen_ids)
    failure_mix.show_shift(dist_a, dist_b, runs[0].name, runs[1].name)
else:
    st.subheader("Per-question success rate")
    st.dataframe(
        _question_table(rows[:_LIST_CAP], runs),
        hide_index=True,
        column_config={"open": st.column_config.LinkColumn("open", display_text="side by side")},
    )

by_question = {r.question_id: r for r in rows}
if by_question:
    asked = params.get_str(nav.P_QUESTION)
    if asked is not None and asked not in by_question:
        st.warning(f"Question {asked} was not played by these runs.")
    # A link naming a new question wins over the question picked before.
    if asked in by_question and asked != st.session_state.get("cmp_question_linked"):
        st.session_state["cmp_question"] = asked
    st.session_state["cmp_question_linked"] = asked
    if st.session_state.get("cmp_question") not in by_question:
        st.session_state["cmp_question"] = next(iter(by_question))
    qid = st.selectbox(
        "Question",
        list(by_question),
        key="cmp_question",
        format_func=lambda q: f"{q} · {by_question[q].question[:80]}",
    )
    params.put(nav.P_QUESTION, qid)
    _side_by_side(by_question[qid], runs)
