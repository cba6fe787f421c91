"""Episodes: filter, sort and page through episodes on the server; one click opens a replay."""

from __future__ import annotations

import dataclasses

import streamlit as st

from app.dashboard.components import browser, nav, params, run_list
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import no_runs_yet
from app.dashboard.episodes import filters, reads, table
from app.dashboard.episodes import query as episode_query
from app.dashboard.episodes.export import export_menu
from storage.read_models import EpisodeFilter, EpisodeSummary, Page, RunSummary


def _window(page: Page[EpisodeSummary]) -> str:
    """What a search bounded to the newest episodes left out, for the list's caption."""
    if page.text_window is None:
        return ""
    return (
        f" (searched the newest {page.text_window:,} episodes; "
        "tick **Search all episodes** for older ones)"
    )


def _groups_link(flt: EpisodeFilter, runs: list[RunSummary]) -> None:
    """A link to the GRPO groups of the training steps listed, for one training run's range
    (a drag across a Training chart lands here)."""
    steps = [(nav.P_TRAIN_FROM, flt.min_train_step), (nav.P_TRAIN_TO, flt.max_train_step)]
    if len(flt.run_ids) != 1 or all(v is None for _, v in steps):
        return
    run = next((r for r in runs if r.id == flt.run_ids[0]), None)
    if run is None or not run.is_training:
        return
    st.page_link(
        nav.GROUPS,
        label="GRPO groups of these training steps",
        icon=":material/workspaces:",
        query_params=[(nav.P_RUN, str(run.id)), *((p, str(v)) for p, v in steps if v is not None)],
    )


def _why_none(flt: EpisodeFilter, runs: list[RunSummary]) -> str:
    """What in the filters leaves nothing to list, where it is plain: a range whose low end
    is above its high end, a training-step range over runs without training steps, an SQL
    error filter over runs whose SQL did not run here."""
    reasons = [
        f"**{low_name}** {low:g} is above **{high_name}** {high:g}"
        for low_name, low, high_name, high in (
            ("Min reward", flt.min_reward, "Max reward", flt.max_reward),
            ("Min steps", flt.min_steps, "Max steps", flt.max_steps),
            ("From training step", flt.min_train_step, "To training step", flt.max_train_step),
        )
        if low is not None and high is not None and low > high
    ]
    chosen = [r for r in runs if not flt.run_ids or r.id in flt.run_ids]
    stepped = flt.min_train_step is not None or flt.max_train_step is not None
    if stepped and chosen and not any(r.is_training for r in chosen):
        which = (
            "no run here is one"
            if not flt.run_ids
            else "the run chosen is not one"
            if len(chosen) == 1
            else "none of the runs chosen is one"
        )
        reasons.append(f"A training step range lists a training run's episodes, and {which}")
    if flt.has_sql_error is not None and chosen and not any(map(_ran_sql, chosen)):
        which = "the run chosen: its" if len(chosen) == 1 else "the runs chosen: their"
        reasons.append(f"**SQL error** is not known for {which} SQL did not run here")
    return "".join(f" {r}." for r in reasons)


def _ran_sql(run: RunSummary) -> bool:
    """Whether rollscope's environment ran (some of) the run's SQL: not a Recorder's, nor an
    import's made without `--questions` (which names no dataset)."""
    unrun = run.source_format == "recorder" or (run.kind == "import" and run.dataset is None)
    return not unrun


def _go_to(cursors: list[str]) -> None:
    params.write(nav.P_CURSOR, cursors)


notices = header("Episodes", copy_link=True)
params.expect(nav.P_CURSOR, *(f.param for f in episode_query.FIELDS))
opening = table.opening()
runs = run_list.offered()
if not runs:
    no_runs_yet()

run_names = {r.id: f"{r.name} (#{r.id})" for r in runs}
filters.show(run_names)
query = episode_query.from_values(st.session_state.to_dict(), tuple(params.get_all(nav.P_CURSOR)))
if opening is not None:
    # The row's "open" button: Replay gets this list, for its back link and prev/next.
    browser.go(
        "ep_open_link",
        nav.REPLAY,
        [(nav.P_EPISODE, str(opening)), (nav.P_FROM, episode_query.to_query_string(query))],
        f"Opening the replay of episode {opening}...",
        icon=":material/replay:",
    )
try:
    page = reads.list_page(query)
except ValueError as exc:  # a cursor cut or edited by hand, or made for another order
    params.notice(f"The link's page cursor is not valid here ({exc}); showing the first page.")
    query = dataclasses.replace(query, cursors=())
    page = reads.list_page(query)
params.show_notices(notices)

start = len(query.cursors) * query.size
total = "?" if page.total is None else f"{page.total:,}{'+' if page.total_capped else ''}"
head, tools = st.columns([4, 1], vertical_alignment="center")
with tools:
    export_menu(query.flt, page.total, {r.id: r.name for r in runs}, at_least=page.total_capped)
if not page.items:
    none = "No episodes match these filters" if not query.cursors else "No more episodes"
    head.info(f"{none}{_window(page)}.{_why_none(query.flt, runs)}")
else:
    head.caption(
        f"Episodes {start + 1:,}-{start + len(page.items):,} of {total}{_window(page)}. "
        "**open** replays an episode; Replay keeps this list for its back link."
    )
    with head:
        _groups_link(query.flt, runs)
    table.show(page)

pager = st.container(horizontal=True, gap="small")  # buttons at their own width, never clipped
pager.button(
    "Previous",
    disabled=not query.cursors,
    on_click=_go_to,
    args=(list(query.cursors[:-1]),),
    icon=":material/chevron_left:",
)
pager.button(
    "Next",
    disabled=page.next_cursor is None,
    on_click=_go_to,
    args=([*query.cursors, page.next_cursor or ""],),
    icon=":material/chevron_right:",
)
