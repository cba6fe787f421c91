"""The question map's sections: the heatmap (a click opens that run's samples of the question),
accuracy per run, and the flips between consecutive runs."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from app.dashboard.analysis import BOOTSTRAP_RESAMPLES, SOLVED_RATE
from app.dashboard.components import browser, nav, params
from app.dashboard.components.render import COUNT_FORMAT, MISSING
from app.dashboard.question_map import reads
from app.dashboard.question_map.charts import accuracy_line, cell_of, heatmap
from app.dashboard.question_map.matrix import PairFlips, QuestionMap, first_with_flips
from app.plural import counted
from storage.read_models import RunKey, RunStep, RunSummary, run_of

_OPEN_FLIP = "map_open_flip"
_OPENING = "map_opening"
SHARED_ONLY = "Only questions every chosen run played"
P_SHARED = "shared"
"""Query parameter: `shared=0` turns `SHARED_ONLY` off (on, the default, leaves it out)."""


def _on_unless_off(name: str) -> params.Codec[bool]:
    """On when the parameter is left out; `name=0` turns it off."""
    flag = params.flag(name, "on or off")

    def parse(values: list[str]) -> tuple[bool, list[str]]:
        if not any(v.strip() for v in values):
            return True, []
        value, problems = flag.parse(values)
        return value or bool(problems), problems  # a bad value is ignored: on

    return params.Codec(parse, lambda value: [] if value else ["0"])


def shared_only_control(whole: reads.MapView) -> bool:
    """For runs that played different questions, a checkbox (on by default, in the URL when
    off) that keeps only the questions every run played; False for runs that played the same."""
    if whole.qmap.complete:
        return False
    return st.checkbox(
        SHARED_ONLY,
        help="Runs that played different questions leave most of the map blank, and their "
        "accuracies are over different questions. Untick to see every question any run played.",
        **params.bind("map_shared", P_SHARED, _on_unless_off(P_SHARED)),
    )


def no_shared_questions(whole: reads.MapView) -> None:
    """One line in place of an empty map."""
    st.info(
        "These runs share no question: pick runs that share questions, or untick the box "
        f"above to map all {whole.questions:,}."
    )


def heatmap_section(
    view: reads.MapView, names: list[str], one_run: RunSummary | None = None
) -> None:
    """The success-rate heatmap (columns named by step alone when all are `one_run`'s); a click
    on a cell opens that run's samples of the question (`cell_target`)."""
    qmap = view.qmap
    which = (
        f"{counted(len(qmap.question_ids), 'question')} every chosen run played "
        f"({view.left_out:,} of the {view.questions:,} left out: some run did not play them)"
        if view.shared_only
        else counted(len(qmap.question_ids), "question")
    )
    st.caption(
        f"{which}, easiest at the top (mean success over the runs). "
        + ("" if qmap.complete else "Grey: not played. ")
        + "Hover a cell for the question; click it to open that run's samples of the question "
        "on GRPO groups, or its one episode on Replay where it has one."
    )
    event = st.plotly_chart(
        heatmap(qmap, names, one_run),
        width="stretch",
        key="map_heatmap",
        on_select="rerun",
        selection_mode="points",
    )
    points = event.selection.points if event is not None else []
    if points and "point_index" in points[0]:
        browser.go("map_cell_link", *cell_target(qmap, int(points[0]["point_index"])))


def cell_target(qmap: QuestionMap, point_index: int) -> tuple[str, list[tuple[str, str]], str]:
    """The page a click on a cell opens, its query and the label of the link: the run's samples
    of the question on GRPO groups, or, for a cell of one episode, that episode on Replay (one
    sample is no group: GRPO learns nothing from it)."""
    key, question_id = cell_of(qmap, point_index)
    row, col = divmod(point_index, len(qmap.run_ids))
    if qmap.episodes[row, col] == 1:
        episode = reads.first_episode(key, question_id)
        if episode is not None:
            query = [(nav.P_EPISODE, str(episode))]
            return nav.REPLAY, query, f"Opening the replay of episode {episode}..."
    query = [(nav.P_RUN, str(run_of(key))), (nav.P_QUESTION, question_id)]
    if isinstance(key, RunStep):  # that step's group of the question
        step = str(key.train_step)
        query += [(nav.P_TRAIN_FROM, step), (nav.P_TRAIN_TO, step)]
    return nav.GROUPS, query, f"Opening the samples of {question_id}..."


def accuracy_section(
    view: reads.MapView,
    run_ids: list[RunKey],
    names: list[str],
    one_run: RunSummary | None = None,
) -> None:
    """Each run's (or step's) accuracy with its bootstrap interval."""
    # Full width, under the heatmap: side by side, a narrow window cut the chart's title and
    # turned its run names on end.
    shared = view.qmap.complete
    st.plotly_chart(
        accuracy_line(
            reads.map_accuracy(tuple(run_ids), view.shared_only),
            names,
            joined=shared,
            one_run=one_run,
        ),
        width="stretch",
        key="map_accuracy",
    )
    each = "step" if one_run is not None else "run"
    caption = (
        f"Paired over questions: {BOOTSTRAP_RESAMPLES:,} resamples of the questions each {each} "
        f"played, the same draws for every {each}."
    )
    if not shared:
        caption += (
            " The runs played different questions (the map's blank cells): each point is over "
            "its own run's questions, so the points are not joined."
        )
    st.caption(caption)


def _open_flip(pair: PairFlips, question_ids: list[str]) -> None:
    click = st.session_state.get(_OPEN_FLIP)
    if click is not None and 0 <= click["row"] < len(question_ids):
        st.session_state[_OPENING] = (pair.run_before, pair.run_after, question_ids[click["row"]])


def flips_section(
    pairs: list[PairFlips], names: Mapping[RunKey, str], one_run: RunSummary | None = None
) -> None:
    """How many questions each run (or training step of `one_run`) lost and gained against the
    one before, and one pair's."""
    opening = st.session_state.pop(_OPENING, None)
    if opening is not None:
        before, after, question_id = opening
        browser.go(
            "map_flip_link",
            nav.COMPARE,
            [(nav.P_RUN, str(before)), (nav.P_RUN, str(after)), (nav.P_QUESTION, question_id)],
            f"Opening {question_id} side by side...",
        )
    each = "step" if one_run is not None else "run"
    st.subheader(f"Flips between consecutive {each}s")
    st.caption(
        f"A {each} solves a question with a success rate of {SOLVED_RATE:.0%} or more; a "
        f"regression is a question the {each} before solved and this one does not."
    )
    summary = pd.DataFrame(
        [
            {
                "from": names[p.run_before],
                "to": names[p.run_after],
                "regressions": len(p.regressions),
                "improvements": len(p.improvements),
                "net": len(p.improvements) - len(p.regressions),
                "shared questions": p.shared,
            }
            for p in pairs
        ]
    )
    st.dataframe(
        summary,
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        column_config={
            c: st.column_config.NumberColumn(format=COUNT_FORMAT)
            for c in ("regressions", "improvements", "net", "shared questions")
        },
    )
    labels = [f"{names[p.run_before]} → {names[p.run_after]}" for p in pairs]
    chosen = st.selectbox(
        "Flips of",
        range(len(pairs)),
        index=first_with_flips(pairs),
        format_func=labels.__getitem__,
        key="map_pair",
    )
    pair = pairs[chosen]
    before, after = names[pair.run_before], names[pair.run_after]
    rows = [
        {
            "open": ":material/compare: side by side",
            "question id": f.question_id,
            "flip": kind,
            before: f.rate_before,
            after: f.rate_after,
        }
        for kind, flips in (("regression", pair.regressions), ("improvement", pair.improvements))
        for f in flips
    ]
    if not rows:
        st.info("No question changed between these two runs.")
        return
    st.dataframe(
        pd.DataFrame(rows),
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        key=f"map_flips_{chosen}",
        column_config={
            "open": st.column_config.ButtonColumn(
                "",
                type="tertiary",
                on_click=_open_flip,
                args=(pair, [str(r["question id"]) for r in rows]),
                key=_OPEN_FLIP,
                pinned=True,
            ),
            before: st.column_config.NumberColumn(format="percent"),
            after: st.column_config.NumberColumn(format="percent"),
        },
    )
