"""GRPO groups: which questions give a run's samples reward variance (learning signal), and one
group's episodes side by side, aligned by step, with their rewards and advantages."""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.dashboard import analysis_data, data
from app.dashboard.components import nav, params
from app.dashboard.components.confidence import confidence_chart, has_confidence
from app.dashboard.components.header import header
from app.dashboard.components.render import (
    escape_markdown,
    fmt_num,
    fmt_pct,
    show_error,
    show_text,
)
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.grpo import ADVANTAGE_EPSILON
from storage.groups import STD_BIN
from storage.read_models import GroupDetail, GroupKey, GroupOverview, RunSummary

_CELL_CHARS = 80  # a step's argument in the aligned grid; the full text is below it
_COLUMNS_PER_ROW = 4
FORMULA = (
    "advantage = (reward − mean) / (std + 1e-4), std the sample standard deviation (n − 1), "
    "as TRL's GRPOTrainer computes it; a group whose rewards are all equal has std 0 and gives "
    "every sample advantage 0 (no learning signal)."
)
assert ADVANTAGE_EPSILON == 1e-4  # the formula above says so


def group_link(run_id: int, key: GroupKey) -> str:
    """The URL of one group's view."""
    link = f"groups?{nav.P_RUN}={run_id}&{nav.P_QUESTION}={quote(key.question_id)}"
    return link if key.group_index is None else f"{link}&{nav.P_GROUP}={key.group_index}"


def _is_training(run: RunSummary) -> bool:
    return run.spec.get("kind") == "training"


def _group_param() -> int | None:
    """The group number in the link (0 or more); a notice and None when it is not one."""
    value = params.get_str(nav.P_GROUP)
    if value is None:
        return None
    if not value.isdigit():
        params.notice(f"{nav.P_GROUP}={value!r} in the link is not a group number; ignored.")
        return None
    return int(value)


def _std_histogram(overview: GroupOverview) -> go.Figure:
    # Binned by the store, not the browser: a training run has tens of thousands of groups,
    # and their stds as points took 0.6 s to serialise and longer to draw.
    starts = [i * STD_BIN for i in range(len(overview.std_counts))]
    centres = [s + STD_BIN / 2 for s in starts] or [STD_BIN / 2]
    fig = go.Figure()
    # The groups GRPO learns nothing from stand apart from the small but non-zero stds that
    # share their bin.
    fig.add_bar(
        x=centres[:1],
        y=[overview.total - overview.with_signal],
        name="no signal (std 0)",
        marker_color="#9e9e9e",
        hovertemplate="std 0: %{y} groups<extra></extra>",
    )
    fig.add_bar(
        x=centres[: len(starts)],
        y=list(overview.std_counts),
        name="with signal",
        customdata=[(s, s + STD_BIN) for s in starts],
        hovertemplate="std %{customdata[0]:.2f}-%{customdata[1]:.2f}: %{y} groups<extra></extra>",
        marker_color="#1f77b4",
    )
    fig.update_traces(width=STD_BIN * 0.95)
    fig.update_layout(
        title="Reward standard deviation of the groups",
        xaxis_title="group std (0: no learning signal)",
        yaxis_title="groups",
        barmode="stack",
        height=300,
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.12},
    )
    fig.update_xaxes(rangemode="tozero")
    return fig


def _overview(run: RunSummary, question: str | None = None) -> None:
    """The run's groups; a training run's groups of one question only, when `question`."""
    training = _is_training(run)
    overview = analysis_data.group_overview(run.id, question if training else None)
    if question is not None and training and overview.total and not overview.groups:
        st.warning(
            f"{run.name} has no finished episode of question {question}; showing all its groups."
        )
        question = None
        overview = analysis_data.group_overview(run.id)
    if not overview.total:
        st.info(f"{run.name} has no finished episodes yet.")
        return
    if overview.largest < 2:
        st.info(
            f"{run.name} has one sample per question, so no GRPO groups: record a run with "
            "`rollscope run --samples K` (K of 2 or more) to see them."
        )
        return
    cols = st.columns(5)
    cols[0].metric("groups", overview.total)
    cols[1].metric("with signal", fmt_pct(overview.signal_fraction))
    cols[2].metric("all correct", overview.all_correct)
    cols[3].metric("all wrong", overview.all_wrong)
    cols[4].metric("mean samples", fmt_num(overview.mean_samples, 1))
    st.caption(FORMULA)
    st.plotly_chart(_std_histogram(overview), width="stretch", key="gr_hist")
    listed = overview.groups
    if training:
        st.subheader("Groups by reward variance")
        st.caption(
            "A training run's group is one question's samples at one training step, as the "
            "trainer drew them: the same question at another step is another group."
        )
    else:
        st.subheader("Questions by reward variance")
    if question is not None and training:
        st.caption(f"The {len(listed)} groups of question {question}; pick one to open it.")
    elif len(listed) < overview.total:
        st.caption(f"The {len(listed)} groups with the highest std of {overview.total}.")
    table = pd.DataFrame(
        [
            {
                "question id": g.key.question_id,
                **({"training step": g.key.train_step} if training else {}),
                "question": overview.questions.get(g.key.question_id, ""),
                "samples": g.size,
                "correct": g.correct,
                "mean reward": g.mean,
                "std": g.std,
                "signal": g.has_signal,
                "open": group_link(run.id, g.key),
            }
            for g in listed
        ]
    )
    event = st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        on_select="rerun",
        selection_mode="single-row",
        key="gr_table",
        column_config={
            "mean reward": st.column_config.NumberColumn(format="%.3f"),
            "std": st.column_config.NumberColumn(format="%.3f"),
            "open": st.column_config.LinkColumn("open", display_text="group"),
        },
    )
    selected = event.selection.rows if event is not None else []
    if selected:
        key = listed[selected[0]].key
        params.write(nav.P_QUESTION, [key.question_id])
        params.write(nav.P_GROUP, [] if key.group_index is None else [str(key.group_index)])
        st.rerun()


def _members_table(group: GroupDetail) -> None:
    rows = []
    for m in group.members:
        s = m.detail.summary
        rows.append(
            {
                "sample": s.sample_index,
                "outcome": s.outcome,
                "class": FAILURE_LABELS.get(s.failure_class, "-") if s.failure_class else "-",
                "reward": s.reward,
                "advantage": m.advantage,
                "steps": s.steps,
                "answer": s.answer,
                "replay": f"replay?{nav.P_EPISODE}={s.id}",
            }
        )
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        column_config={
            "reward": st.column_config.NumberColumn(format="%.3f"),
            "advantage": st.column_config.NumberColumn(format="%+.3f"),
            "replay": st.column_config.LinkColumn("replay", display_text="open"),
        },
    )


def _member_label(group: GroupDetail, i: int) -> str:
    m = group.members[i]
    return (
        f"#{m.detail.summary.sample_index} r {fmt_num(m.detail.summary.reward, 2)}"
        f" A {m.advantage:+.2f}"
    )


def _aligned_grid(group: GroupDetail) -> None:
    """Rows are steps, columns are samples: each cell the action and its argument."""
    longest = max(len(m.detail.steps) for m in group.members)
    grid: dict[str, list[str]] = {}
    for i, m in enumerate(group.members):
        cells = []
        for k in range(longest):
            if k >= len(m.detail.steps):
                cells.append("")
                continue
            step = m.detail.steps[k]
            arg = " ".join(step.argument.split())
            arg = arg if len(arg) <= _CELL_CHARS else arg[: _CELL_CHARS - 1] + "…"
            marks = ("" if step.parsed else " [unparsed]") + (" [error]" if step.error else "")
            cells.append(f"{step.action} {arg}{marks}")
        grid[_member_label(group, i)] = cells
    frame = pd.DataFrame(grid, index=pd.Index(range(1, longest + 1), name="step"))
    st.dataframe(frame, width="stretch")


def _step_side_by_side(group: GroupDetail) -> None:
    longest = max(len(m.detail.steps) for m in group.members)
    step_no = (
        st.slider("Step", 1, longest, 1, key="gr_step") if longest > 1 else 1
    )  # fmt: skip
    members = group.members
    for start in range(0, len(members), _COLUMNS_PER_ROW):
        chunk = list(enumerate(members))[start : start + _COLUMNS_PER_ROW]
        cols = st.columns(_COLUMNS_PER_ROW)
        for col, (i, m) in zip(cols, chunk, strict=False):
            with col:
                st.markdown(f"**{escape_markdown(_member_label(group, i))}**")
                if step_no > len(m.detail.steps):
                    st.caption("(episode over)")
                    continue
                step = m.detail.steps[step_no - 1]
                st.caption(
                    f"{step.action} · reward {step.reward:+.3f}"
                    + ("" if step.parsed else " · unparsed")
                )
                show_text(step.argument, language="sql" if step.action == "QUERY" else None)
                if step.error is not None:
                    show_error(step.error)
                st.page_link(
                    nav.REPLAY,
                    label="Replay this step",
                    query_params={
                        nav.P_EPISODE: str(m.detail.summary.id),
                        nav.P_STEP: str(step_no),
                    },
                    icon=":material/replay:",
                )


def _back_to_overview() -> None:
    """Back to the run's overview (from a group, or for another run): no group in the link."""
    params.write(nav.P_QUESTION, [])
    params.write(nav.P_GROUP, [])


def _group_view(run: RunSummary, key: GroupKey) -> None:
    # A button that rewrites the query, not a page link: a link to this same page left the
    # browser's URL on the group, and the next rerun (a click in the table) reopened it.
    st.button(
        f"All groups of {run.name}",
        icon=":material/arrow_back:",
        type="tertiary",
        on_click=_back_to_overview,
        key="gr_back",
    )
    group = analysis_data.get_group(run.id, key)
    if group is None:
        which = "" if key.group_index is None else f" in group {key.group_index}"
        st.warning(f"{run.name} has no finished episode of question {key.question_id}{which}.")
        return
    first = group.members[0].detail
    key = group.stats.key  # with its training step
    if key.group_index is None:
        st.subheader(f"Question {key.question_id}")
    else:
        st.subheader(f"Question {key.question_id}, training step {key.train_step}")
    st.markdown(escape_markdown(first.summary.question))
    stats = group.stats
    cols = st.columns(5)
    cols[0].metric("samples", stats.size)
    cols[1].metric("correct", stats.correct)
    cols[2].metric("mean reward", fmt_num(stats.mean, 3))
    cols[3].metric("std", fmt_num(stats.std, 3))
    cols[4].metric("learning signal", "yes" if stats.has_signal else "none")
    if not stats.has_signal:
        st.warning(
            "Zero reward variance: every sample has advantage 0, so GRPO learns nothing "
            "from this group.",
            icon=":material/block:",
        )
    st.caption(FORMULA)
    _members_table(group)
    st.subheader("Steps side by side")
    _aligned_grid(group)
    _step_side_by_side(group)
    traced = [(_member_label(group, i), m.detail.steps) for i, m in enumerate(group.members)]
    if any(has_confidence(steps) for _, steps in traced):
        st.plotly_chart(confidence_chart(traced), width="stretch", key="gr_confidence")


notices = header("GRPO groups", copy_link=True)
runs = data.list_runs()
if not runs:
    st.info("No runs yet - run `rollscope run --policy oracle --dataset demo` to record one.")
    st.stop()
by_id = {r.id: r for r in runs}
# Without a run in the link: a run with groups (several samples per question) first.
grouped = [r for r in runs if int(r.spec.get("samples") or 1) > 1]
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
        on_change=_back_to_overview,
    ),
)
question = params.get_str(nav.P_QUESTION)
group_index = _group_param()
if question is None and group_index is not None:
    # A group is opened by its question and its number (`group_link`); a number alone is a
    # link cut short, or typed.
    params.notice(
        f"{nav.P_GROUP}={group_index} in the link comes without its question "
        f"({nav.P_QUESTION}=...); showing all groups."
    )
params.show_notices(notices)
if question is None:
    _overview(by_id[run_id])
elif group_index is None and _is_training(by_id[run_id]):
    # A question without its group (a link from the question map): its groups to pick from.
    _overview(by_id[run_id], question)
else:
    _group_view(by_id[run_id], GroupKey(question, group_index))
