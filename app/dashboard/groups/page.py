"""GRPO groups: where a run's learning signal comes from (correctness or shaping), and one
group's episodes side by side, aligned by step, with their rewards and advantages."""

from __future__ import annotations

import streamlit as st

from app.dashboard.components import agents, nav, params, run_list
from app.dashboard.components.colors import short_name
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import no_runs_yet
from app.dashboard.components.params import Codec
from app.dashboard.groups import detail, overview, reads
from storage.models import INTEGER_RANGE
from storage.read_models import GroupKey, RunSummary


def _group_param() -> int | None:
    """The group number in the link (0 or more); a notice and None when it is not one."""
    value = params.get_str(nav.P_GROUP)
    if value is None:
        return None
    if not value.isdecimal() or int(value) not in INTEGER_RANGE:
        params.notice(f"{nav.P_GROUP}={value!r} in the link is not a group number; ignored.")
        return None
    return int(value)


def _at_param() -> tuple[bool, int | None]:
    """Whether the link names the training step of a group without a number, and the step
    (None: `at=none`, the samples without one); a notice and (False, None) when it is not."""
    value = params.get_str(nav.P_AT)
    if value is None:
        return False, None
    if value == nav.AT_NONE:
        return True, None
    if not value.isdecimal() or int(value) not in INTEGER_RANGE:
        params.notice(
            f"{nav.P_AT}={value!r} in the link is not a training step (or {nav.AT_NONE}); ignored."
        )
        return False, None
    return True, int(value)


def _run_codec(grouped: list[RunSummary], others: dict[int, RunSummary]) -> Codec[int]:
    """The run in the link, one of those with groups; a run of one sample per question is
    noted as such (not as unknown), and the first with groups shown."""
    default = grouped[0]
    codec = params.choice(nav.P_RUN, [r.id for r in grouped], default.id, "a run in this store")

    def parse(values: list[str]) -> tuple[int, list[str]]:
        given = [v.strip() for v in values if v.strip()]
        if given and given[-1].isdecimal() and (run := others.get(int(given[-1]))):
            return default.id, [
                f"{short_name(run.name)} (#{run.id}) has one sample per question, so no GRPO "
                "groups; "
                f"showing {short_name(default.name)} (#{default.id})."
            ]
        return codec.parse(values)

    return Codec(parse, codec.dump)


notices = header("GRPO groups", copy_link=True)
params.expect(nav.P_RUN, nav.P_QUESTION, nav.P_GROUP, nav.P_AT, nav.P_TRAIN_FROM, nav.P_TRAIN_TO)
# Read first: a bad one is noted on a store without groups too.
group_param = _group_param()
at_param, at_step = _at_param()
runs = run_list.offered()
if not runs:
    no_runs_yet()
# Only runs that can hold groups are offered: a run of one sample per question has none.
grouped = [r for r in runs if overview.may_have_groups(r)]
if not grouped:
    params.show_notices(notices)
    st.info("No run in this store has several samples per question: " + overview.RECORD_GROUPS)
    st.stop()
by_id = {r.id: r for r in grouped}
others = {r.id: r for r in runs if r.id not in by_id}
linked = params.get_str(nav.P_RUN)
# A link to a run without groups (an old question-map click) opens no question of another run.
refused = linked is not None and linked.isdecimal() and int(linked) in others
run_codec = _run_codec(grouped, others)
run_id: int = st.selectbox(
    "Run",
    list(by_id),
    format_func=lambda i: f"{by_id[i].name} (#{i})",
    # another run: back to its overview
    **params.bind(
        "gr_run",
        nav.P_RUN,
        run_codec,
        on_change=lambda: detail.back_to_overview(st.session_state["gr_run"]),
    ),
)
question = None if refused else params.get_str(nav.P_QUESTION)
group_index = None if refused else group_param
at_param = at_param and not refused
if question is None and (group_index is not None or at_param):
    # A group is opened by its question and its number or step (`overview.group_query`); a
    # number or step alone is a link cut short, or typed.
    given = (
        f"{nav.P_GROUP}={group_index}"
        if group_index is not None
        else f"{nav.P_AT}={nav.AT_NONE if at_step is None else at_step}"
    )
    params.notice(
        f"{given} in the link comes without its question ({nav.P_QUESTION}=...); showing all "
        "groups."
    )
run = by_id[run_id]
stepped = overview.by_step(run)
# In a run by training step, a question without its group's number or step (a link from the
# question map) lists its groups; in a batch run, a question's samples are its group.
opened = group_index is not None or (at_param and stepped)
listing = question is None or (stepped and not opened)
steps = overview.step_range(run) if listing else (None, None)
params.show_notices(notices)
agents.show([run])
if question is None:
    overview.show(run, steps=steps)
elif listing:
    # A question without its group (a link from the question map): its groups to pick from.
    overview.show(run, question, steps)
elif reads.overview(run.id).largest < 2:
    # An import of one sample per question: no group to show, whatever the link asks.
    overview.show(run)
else:
    key = GroupKey(question, group_index, at_step if stepped else None)
    if stepped and group_index is None and at_step is not None and not reads.group(run.id, key):
        # A step without a number where the run's groups are numbered (a hand-made link): the
        # question's group at that step, or its groups there to pick from.
        at_that_step = reads.overview(run.id, question, (at_step, at_step)).groups
        if len(at_that_step) > 1:
            overview.show(run, question, (at_step, at_step))
            st.stop()
        key = at_that_step[0].key if at_that_step else key
    detail.show(run, key, stepped)
