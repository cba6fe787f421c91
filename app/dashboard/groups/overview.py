"""A run's GRPO groups: counted by where their reward spread comes from, and listed by std."""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
import streamlit as st

from app.dashboard.components import nav, params
from app.dashboard.components.render import MISSING, escape_markdown
from app.dashboard.groups import reads
from app.dashboard.groups.charts import NO_ADVANTAGE, std_histogram
from app.dashboard.groups.signal import SOURCE_LABELS, TRAINER_TERMS, shaping_terms
from app.plural import counted
from app.render import fmt_num, fmt_pct
from rollout_core.grpo import ADVANTAGE_EPSILON
from storage.read_models import GroupKey, GroupOverview, GroupStats, RunSummary

FORMULA = (
    "advantage = (reward − mean) / (std + 1e-4), std the sample standard deviation (n − 1), "
    "as TRL's GRPOTrainer computes it; a group whose rewards are all equal has std 0 and gives "
    "every sample advantage 0: no advantage, so no learning signal."
)
assert ADVANTAGE_EPSILON == 1e-4  # the formula above says so
SHAPING_FLAG = "⚠ shaping only"
_OPEN = "gr_open"
REPLACED = "replaced"
"""The column, shown where a listed group holds any, of the samples of an earlier play."""


def group_query(run_id: int, key: GroupKey, stepped: bool) -> list[tuple[str, str]]:
    """The query of one group's view: its run and question, and its number, or, in a run
    whose groups are by training step (`stepped`), the step of a group without one."""
    query = [(nav.P_RUN, str(run_id)), (nav.P_QUESTION, key.question_id)]
    if key.group_index is not None:
        query.append((nav.P_GROUP, str(key.group_index)))
    elif stepped:
        step = key.train_step
        query.append((nav.P_AT, nav.AT_NONE if step is None else str(step)))
    return query


def group_link(run_id: int, key: GroupKey, stepped: bool) -> str:
    """The URL of one group's view (`group_query`)."""
    return "groups?" + "&".join(f"{k}={quote(v)}" for k, v in group_query(run_id, key, stepped))


def spread_label(stats: GroupStats) -> str:
    """Where a group's spread comes from, in words; a shaping-only group flagged."""
    source = stats.source
    return SHAPING_FLAG if source == "shaping only" else SOURCE_LABELS[source]


def may_have_groups(run: RunSummary) -> bool:
    """Whether the run can hold groups of several samples. A batch rollscope played holds the
    samples per question its spec names; any other run may (a trainer's, an import, a fork of
    several samples of a question, an environment server's or a Recorder's)."""
    if run.kind == "batch" and run.played_here:
        return int(run.spec.get("samples") or 1) > 1
    return True


RECORD_GROUPS = "record a run with `rollscope run --samples K` (K of 2 or more) to see them."


def no_groups(run: RunSummary) -> None:
    """Say that the run has no groups, and how to get some."""
    st.info(
        f"{escape_markdown(run.name)} has one sample per question, so no GRPO groups: "
        + RECORD_GROUPS
    )


def by_step(run: RunSummary) -> bool:
    """Whether the run's groups are a question at a training step (else a question's
    samples): its episodes carry training steps, whatever its kind (an environment server's
    or a Recorder's may); an import of files that name no step (an evaluation) has none."""
    return reads.by_step(run.id)


def go_to(run_id: int, key: GroupKey | None, stepped: bool = False) -> None:
    """This page on a group of the run (None: on the run's groups) in one change of the URL: a
    change per parameter left a half-made link in the history for browser Back to land on.

    The run is written, not kept from the URL: a click can reach the server with the URL of a
    rerun still under way, and a group's link without its run opens whichever run is the
    default then (the newest with groups)."""
    query = {k: st.query_params.get_all(k) for k in st.query_params}
    for name in (nav.P_QUESTION, nav.P_GROUP, nav.P_AT):
        query.pop(name, None)
    query[nav.P_RUN] = [str(run_id)]
    if key is not None:
        query.update((k, [v]) for k, v in group_query(run_id, key, stepped))
    st.query_params.from_dict(query)


def _open_group(run_id: int, keys: list[GroupKey], stepped: bool) -> None:
    """The table's "open" button: this page, on the group of that row."""
    click = st.session_state.get(_OPEN)
    if click is not None and 0 <= click["row"] < len(keys):
        go_to(run_id, keys[click["row"]], stepped)


def _counts(run: RunSummary, found: GroupOverview) -> None:
    """Every group of the run counted by the source of its spread and by its right samples."""

    def count(n: int) -> str:
        return f"{n:,} ({fmt_pct(n / found.total)})"

    by_source = found.by_source
    judged = found.trainer_judged
    terms = TRAINER_TERMS if judged else shaping_terms(run)
    # A wrapping row: at 800 px seven fixed columns cut every value short.
    with st.container(horizontal=True, gap="medium"):
        st.metric("groups", f"{found.total:,}", width="content")
        st.metric(
            "correctness signal",
            count(by_source["correctness"]),
            width="content",
            help="Groups with correct and wrong samples: their advantages favour the right answer.",
        )
        st.metric(
            "shaping only",
            count(by_source["shaping only"]),
            width="content",
            help="Rewards differ, but every sample is correct or none is: the advantages come "
            f"from {terms} alone.",
        )
        st.metric(
            NO_ADVANTAGE,
            count(by_source["none"]),
            width="content",
            help="All rewards equal (std 0): every advantage is 0, GRPO learns nothing from "
            "these groups."
            if not judged
            else "Every advantage the trainer gave is 0 (or, where it reported none, every "
            "reward is equal): GRPO learns nothing from these groups.",
        )
        st.metric(
            "no correct sample",
            f"{found.none_correct:,}",
            width="content",
            help="Groups without a correct sample, whatever their rewards (shaping-only and "
            "equal ones alike).",
        )
        st.metric("all correct", f"{found.all_correct:,}", width="content")
        st.metric("mean samples", fmt_num(found.mean_samples, 1), width="content")
    if judged:
        st.caption(
            f"Counted by the advantages the trainer gave, where it reported them ({judged:,} of "
            f"{found.total:,} groups): its reward need not be the episode's. A run trained on "
            "correctness alone gave groups whose rewards differ only by shaping no advantage."
        )
    shaping = by_source["shaping only"]
    if shaping and judged:
        st.warning(
            f"{shaping:,} of {found.total:,} groups got advantages from the trainer though none "
            f"of their samples is correct, or all are: from {terms} alone.",
            icon=":material/warning:",
        )
    elif shaping and run.source_format is not None:
        st.warning(
            f"{shaping:,} of {found.total:,} groups get their advantages from "
            f"{shaping_terms(run)} alone: none of their samples is correct, or all are. An "
            "imported episode whose file gives no verdict is correct when its reward reaches "
            "`rollscope import --correct-at` (1 by default); where a format reward alone "
            "reaches it, import again with the reward a correct rollout gets.",
            icon=":material/warning:",
        )
    elif shaping:
        st.warning(
            f"{shaping:,} of {found.total:,} groups get their advantages from shaping "
            "alone: none of their samples is correct, or all are, and their rewards differ only "
            "by QUERY progress rewards and −0.01 error penalties. Dividing by (std + 1e-4) scales "
            "those few hundredths to advantages as large as a right answer's: this is noise to "
            "learn from, not signal.",
            icon=":material/warning:",
        )


StepRange = tuple[int | None, int | None]
"""A training run's first and last training step shown (None: that end open)."""
_TRAIN_FROM, _TRAIN_TO = "gr_tmin", "gr_tmax"


def step_range(run: RunSummary) -> StepRange:
    """The range of training steps whose groups are shown: two inputs bound to the link's
    `tmin` and `tmax`, for a run whose groups are by step (else every step)."""
    if not by_step(run):
        return None, None
    bounds: list[int | None] = []
    with st.container(horizontal=True):
        for key, param, label in (
            (_TRAIN_FROM, nav.P_TRAIN_FROM, "From training step"),
            (_TRAIN_TO, nav.P_TRAIN_TO, "To training step"),
        ):
            codec = params.whole(param, "a training step")
            bound = params.bind(key, param, codec)
            bounds.append(
                st.number_input(label, value=None, min_value=0, step=1, width=170, **bound)
            )
    return bounds[0], bounds[1]


def _steps_words(steps: StepRange) -> str:
    """'training steps 3-7', 'training steps from 3', 'training steps up to 7'."""
    first, last = steps
    if first is not None and last is not None:
        return f"training step {first}" if first == last else f"training steps {first}-{last}"
    return f"training steps from {first}" if first is not None else f"training steps up to {last}"


def show(run: RunSummary, question: str | None = None, steps: StepRange = (None, None)) -> None:
    """The run's groups; a training run's groups of one question only, when `question`, and
    of a range of training steps, when `steps` has an end."""
    training = by_step(run)
    steps = steps if training else (None, None)
    ranged = steps != (None, None)
    at = f" at {_steps_words(steps)}" if ranged else ""
    first, last = steps
    if first is not None and last is not None and first > last:
        st.info(f"**From training step** {first} is above **To training step** {last}.")
        return
    found = reads.overview(run.id, question if training else None, steps)
    if question is not None and training and found.total and not found.groups:
        st.warning(
            f"{run.name} has no finished episode of question {question}{at}; showing all its "
            "groups."
        )
        question = None
        found = reads.overview(run.id, None, steps)
    if not found.total:
        st.info(f"{run.name} has {f'no group{at}' if ranged else 'no finished episodes yet'}.")
        return
    if found.largest < 2:
        no_groups(run)
        return
    _counts(run, found)
    st.caption(FORMULA)
    histogram = std_histogram(
        found.by_source["none"], found.std_counts, found.std_bin, found.std_beyond
    )
    st.plotly_chart(histogram, width="stretch", key="gr_hist")
    if beyond := sum(found.std_beyond.values()):
        st.caption(
            f"The rewards of {counted(beyond, 'group')} are too large for a std to be computed "
            "from their sums, which overflow a float: the chart counts them apart (**too "
            "large**), and the list shows their std as inf."
        )
    listed = found.groups
    if training:
        st.subheader("Groups by reward variance")
        st.caption(
            "A training run's group is one question's samples at one training step, as the "
            "trainer drew them: the same question at another step is another group."
        )
    else:
        st.subheader("Questions by reward variance")
    if question is not None and training:
        st.caption(
            f"The {counted(len(listed), 'group')} of question {question}{at}; **open** one to "
            "see it."
        )
    elif len(listed) < found.total:
        st.caption(
            f"The {counted(len(listed), 'group')} with the highest std of {found.total:,}{at}."
        )
    elif ranged:
        st.caption(f"The {counted(len(listed), 'group')}{at}.")
    replaced = reads.replaced(run.id) if training else {}
    shown_replaced = any(g.key in replaced for g in listed)
    table = pd.DataFrame(
        [
            {
                "open": ":material/arrow_forward: open",
                "question id": g.key.question_id,
                **({"training step": g.key.train_step} if training else {}),
                **({REPLACED: replaced.get(g.key, 0)} if shown_replaced else {}),
                "spread from": spread_label(g),
                "samples": g.size,
                "correct": g.correct,
                "mean reward": g.mean,
                "std": g.std,
                "question": found.questions.get(g.key.question_id, ""),
            }
            for g in listed
        ]
    )
    st.dataframe(
        table,
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        key="gr_table",
        column_config={
            "open": st.column_config.ButtonColumn(
                "",
                type="tertiary",
                on_click=_open_group,
                args=(run.id, [g.key for g in listed], training),
                key=_OPEN,
                pinned=True,
            ),
            "mean reward": st.column_config.NumberColumn(format="%.3f"),
            "std": st.column_config.NumberColumn(format="%.3f"),
            "question": st.column_config.TextColumn(width="medium"),
            REPLACED: st.column_config.NumberColumn(
                format="%d",
                help="Samples of an earlier play of the step, which its rewritten step file no "
                "longer holds (a trainer resumed from a checkpoint played the step again). "
                "Training leaves them out.",
            ),
        },
    )
