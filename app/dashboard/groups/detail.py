"""One GRPO group: its samples' rewards and advantages split into correctness and shaping, and
their steps side by side."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard.components import browser, nav
from app.dashboard.components.confidence import has_confidence
from app.dashboard.components.outcome import outcome_label
from app.dashboard.components.render import MISSING, escape_markdown, show_error, show_step_action
from app.dashboard.groups import reads
from app.dashboard.groups.charts import group_confidence
from app.dashboard.groups.overview import FORMULA, go_to, spread_label
from app.dashboard.groups.signal import shaping_terms, split_members, spread_stds
from app.render import action_label, fmt_num, fmt_signed
from rollout_core.failure_classes import FAILURE_LABELS
from storage.read_models import GroupDetail, GroupKey, RunSummary

NO_CONFIDENCE = (
    "Confidence per step not drawn, as these samples' records hold none: token "
    "log-probability and entropy."
)
_CELL_CHARS = 80  # a step's argument in the aligned grid; the full text is below it
_COLUMNS_PER_ROW = 4
_REPLAY = "gr_replay"
_REPLAYING = "gr_replaying"


def back_to_overview(run_id: int) -> None:
    """Back to the run's overview (from a group, or for another run): no group in the link."""
    go_to(run_id, None)


def _replay_clicked(episode_ids: list[int]) -> None:
    click = st.session_state.get(_REPLAY)
    if click is not None and 0 <= click["row"] < len(episode_ids):
        st.session_state[_REPLAYING] = episode_ids[click["row"]]


def _follow_to_replay() -> None:
    """After a click on a sample's "open": its replay, as Episodes opens one."""
    opening = st.session_state.pop(_REPLAYING, None)
    if opening is None:
        return
    browser.go(
        "gr_replay_link",
        nav.REPLAY,
        [(nav.P_EPISODE, str(opening))],
        f"Opening the replay of episode {opening}...",
        icon=":material/replay:",
    )


_SAME_ADVANTAGE = 1e-3
"""How far the trainer's advantage may be from the computed one and still be the same (the
file rounds it, the trainer's epsilon differs)."""


def _members_table(group: GroupDetail) -> None:
    rows = []
    # The trainer's own advantages, where it reported them (TRL's files, a recorded TRL run):
    # beside the computed ones, which assume the episode's reward, GRPO's default scaling and
    # equal reward weights.
    reported = any(m.detail.trainer_advantage is not None for m in group.members)
    for m, split in zip(group.members, split_members(group), strict=True):
        s = m.detail.summary
        rows.append(
            {
                "open": ":material/play_arrow: open",
                "sample": s.sample_index,
                "outcome": outcome_label(s.outcome),
                "reward": s.reward,
                "correctness": split.correctness,
                "shaping": split.shaping,
                "advantage": m.advantage,
                **({"trainer's advantage": m.detail.trainer_advantage} if reported else {}),
                "from correctness": split.advantage_correctness,
                "from shaping": split.advantage_shaping,
                "class": FAILURE_LABELS.get(s.failure_class, "-") if s.failure_class else "-",
                "steps": s.steps,
                "answer": s.answer,
            }
        )
    signed = st.column_config.NumberColumn(format="%+.3f")
    st.dataframe(
        pd.DataFrame(rows),
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        column_config={
            "open": st.column_config.ButtonColumn(
                "",
                type="tertiary",
                on_click=_replay_clicked,
                args=([m.detail.summary.id for m in group.members],),
                key=_REPLAY,
                pinned=True,
            ),
            "reward": st.column_config.NumberColumn(format="%.3f"),
            "correctness": st.column_config.NumberColumn(
                format="%.2f", help="The answer's part of the reward: 1 if correct, else 0."
            ),
            "shaping": st.column_config.NumberColumn(
                format="%+.3f",
                help="The rest of the reward: QUERY progress rewards and error penalties.",
            ),
            "advantage": signed,
            "trainer's advantage": st.column_config.NumberColumn(
                format="%+.3f",
                help="The advantage the trainer gave the sample, as it reported it. The "
                "advantage beside it is computed from the episode's reward as GRPO does by "
                "default; they differ where the trainer's reward functions give another "
                "reward, or it weighs or scales them otherwise.",
            ),
            "from correctness": st.column_config.NumberColumn(
                format="%+.3f", help="The advantage's part that the correctness terms give."
            ),
            "from shaping": st.column_config.NumberColumn(
                format="%+.3f", help="The advantage's part that the shaping terms give."
            ),
        },
    )
    if reported and any(
        m.detail.trainer_advantage is not None
        and abs(m.detail.trainer_advantage - m.advantage) > _SAME_ADVANTAGE
        for m in group.members
    ):
        st.caption(
            "The trainer gave these samples other advantages (**trainer's advantage**) than "
            "GRPO's default computes from their rewards: its reward functions gave other "
            "rewards, or it weighed or scaled them otherwise, and it trained on its own."
        )


def _member_label(group: GroupDetail, i: int) -> str:
    m = group.members[i]
    return (
        f"#{m.detail.summary.sample_index} r {fmt_num(m.detail.summary.reward, 2)}"
        f" A {fmt_signed(m.advantage, 2)}"
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
            arg = " ".join(step.acted_on.split())
            arg = arg if len(arg) <= _CELL_CHARS else arg[: _CELL_CHARS - 1] + "…"
            marks = (" [unparsed]" if step.fell_back else "") + (" [error]" if step.error else "")
            cells.append(f"{action_label(step)} {arg}{marks}")
        grid[_member_label(group, i)] = cells
    frame = pd.DataFrame(grid, index=pd.Index(range(1, longest + 1), name="step"))
    st.dataframe(frame, width="stretch", placeholder=MISSING)


def _step_side_by_side(group: GroupDetail) -> None:
    longest = max(len(m.detail.steps) for m in group.members)
    step_no = st.slider("Step", 1, longest, 1, key="gr_step") if longest > 1 else 1
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
                show_step_action(step)
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


def _signal_notice(run: RunSummary, group: GroupDetail) -> None:
    """Say where the advantages come from: nothing, shaping alone, or correctness (with how
    much of the spread shaping adds)."""
    stats = group.stats
    source = stats.source
    judged = stats.trainer_advantage is not None  # the trainer's advantages decided
    if source == "none":
        st.warning(
            "The trainer gave every sample advantage 0, so GRPO learned nothing from this group."
            if judged
            else "Zero reward variance: every sample has advantage 0, so GRPO learns nothing "
            "from this group.",
            icon=":material/block:",
        )
        return
    std_correct, std_shaping = spread_stds(group)
    largest = max(abs(m.advantage) for m in group.members)
    which = "none of the samples is correct" if stats.correct == 0 else "every sample is correct"
    if source == "shaping only" and judged:
        st.warning(
            f"Advantages from the trainer's reward terms other than correctness: {which}, yet "
            f"the trainer gave advantages of up to ±{fmt_num(stats.trainer_advantage, 2)}.",
            icon=":material/warning:",
        )
        return
    if source == "shaping only":
        st.warning(
            f"Advantages from shaping alone: {which}, and the rewards differ only by "
            f"{shaping_terms(run)} (std {fmt_num(std_shaping, 3)}). Dividing by "
            f"std + 1e-4 scales them to advantages of up to ±{fmt_num(largest, 2)}: GRPO pushes "
            "these samples as hard as if one had answered right.",
            icon=":material/warning:",
        )
        return
    st.caption(
        f"Spread: the correctness terms' std is {fmt_num(std_correct, 3)}, the shaping terms' "
        f"{fmt_num(std_shaping, 3)}; each sample's advantage is split below into the part each "
        "gives."
    )


def show(run: RunSummary, key: GroupKey, stepped: bool) -> None:
    """One group of the run (`stepped`: a run whose groups are by training step, where a
    group without a number is its question's samples at the key's step): its samples side
    by side."""
    _follow_to_replay()
    # A button that rewrites the query, not a page link: a link to this same page left the
    # browser's URL on the group, and the next rerun (a click in the table) reopened it.
    st.button(
        f"All groups of {run.name}",
        icon=":material/arrow_back:",
        type="tertiary",
        on_click=back_to_overview,
        args=(run.id,),
        key="gr_back",
    )
    group = reads.group(run.id, key)
    if group is None:
        step = key.train_step
        if key.group_index is not None:
            which = f" in group {key.group_index}"
        elif stepped:
            which = " without a training step" if step is None else f" at training step {step}"
        else:
            which = ""
        st.warning(f"{run.name} has no finished episode of question {key.question_id}{which}.")
        return
    first = group.members[0].detail
    key = group.stats.key  # with its training step
    if key.group_index is None and not stepped:
        st.subheader(f"Question {key.question_id}")
    elif key.train_step is None:
        st.subheader(f"Question {key.question_id}, without a training step")
    else:
        st.subheader(f"Question {key.question_id}, training step {key.train_step}")
    st.markdown(escape_markdown(first.summary.question))
    stats = group.stats
    with st.container(horizontal=True, gap="medium"):
        st.metric("samples", stats.size, width="content")
        st.metric("correct", f"{stats.correct} of {stats.size}", width="content")
        st.metric("mean reward", fmt_num(stats.mean, 3), width="content")
        st.metric("std", fmt_num(stats.std, 3), width="content")
        st.metric("spread from", spread_label(stats), width="content")
    if left := reads.replaced(run.id).get(key):
        which = (
            ("Its sample is" if stats.size == 1 else "Its samples are")
            if left == stats.size
            else f"{left} of its {stats.size} samples {'is' if left == 1 else 'are'}"
        )
        st.caption(
            f"{which} of an earlier play of this step, which a later play replaced (a "
            "trainer resumed from a checkpoint played the step again): Training leaves them "
            "out."
        )
    _signal_notice(run, group)
    st.caption(FORMULA)
    _members_table(group)
    st.subheader("Steps side by side")
    _aligned_grid(group)
    _step_side_by_side(group)
    traced = [(_member_label(group, i), m.detail.steps) for i, m in enumerate(group.members)]
    if any(has_confidence(steps) for _, steps in traced):
        st.plotly_chart(group_confidence(run.id, traced), width="stretch", key="gr_confidence")
    else:
        st.caption(NO_CONFIDENCE)
