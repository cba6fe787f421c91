"""The Episodes table: what a reader compares first, the long texts last, an "open" button per
row that Replay follows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
import streamlit as st

from app.dashboard.components.outcome import outcome_label
from app.dashboard.components.render import MISSING
from app.dashboard.episodes import reads
from rollout_core.failure_classes import FAILURE_LABELS
from storage.read_models import EpisodeSummary, Page

# Widths in the grid's 14 px font: about 6.6 px a character, padding around a cell and a chip.
_CHAR_PX = 6.6
_CELL_PAD_PX = 24
_CHIP_PAD_PX = 20
_TAGS_LEAST_PX = 80
_MOST_PX = 480
_QUESTION_MOST_PX = 900
_OPEN = "ep_open"
REPLACED = "replaced"
"""The column, shown where the page holds such an episode, of those a rewrite of their step
file dropped."""
_OPENING = "ep_opening"


def opening() -> int | None:
    """The episode whose "open" button was clicked in the last run, once."""
    found: int | None = st.session_state.pop(_OPENING, None)
    return found


def _rows(items: list[EpisodeSummary]) -> pd.DataFrame:
    # What a reader compares first, then the question (whole, visible at 1400 px without
    # scrolling sideways), then the flags and the answer.
    tags = reads.episode_tags(tuple(e.id for e in items))
    replaced = reads.replaced(tuple(e.id for e in items))
    return pd.DataFrame(
        [
            {
                "open": ":material/play_arrow: open",
                "run": e.run_name,
                "training step": e.train_step,
                REPLACED: e.id in replaced,
                "outcome": outcome_label(e.outcome),
                "reward": e.reward,
                "steps": e.steps,
                "class": FAILURE_LABELS[e.failure_class] if e.failure_class else None,
                "tags": tags.get(e.id, []),
                "question id": e.question_id,
                "sample": e.sample_index,
                "SQL error": e.has_sql_error,
                "unparsed": e.has_unparsed,
                "database": e.db_id,
                "question": e.question,
                "answer": e.answer,
                "seconds": e.duration_seconds,
                "id": e.id,
            }
            for e in items
        ],
        columns=[
            "open",
            "run",
            *(["training step"] if any(e.train_step is not None for e in items) else []),
            *([REPLACED] if replaced else []),
            "outcome",
            "reward",
            "steps",
            "class",
            "question",
            "tags",
            "question id",
            "sample",
            "SQL error",
            "unparsed",
            "database",
            "answer",
            "seconds",
            "id",
        ],
    )


def _clicked(episode_ids: list[int]) -> None:
    click = st.session_state.get(_OPEN)
    if click is not None and 0 <= click["row"] < len(episode_ids):
        st.session_state[_OPENING] = episode_ids[click["row"]]


def text_width(texts: Iterable[str], *, least: int, most: int) -> int:
    """Pixels a column needs to show its longest text whole, between `least` and `most`: the
    grid cuts a cell at its column's width and shows no more of it on hover."""
    longest = max((len(t) for t in texts), default=0)
    return int(min(most, max(least, longest * _CHAR_PX + _CELL_PAD_PX)))


def _tags_width(tags: Iterable[Sequence[str]]) -> int:
    chips = [sum(len(t) * _CHAR_PX + _CHIP_PAD_PX for t in row) for row in tags]
    return int(min(_MOST_PX, max(_TAGS_LEAST_PX, max(chips, default=0) + _CELL_PAD_PX)))


def show(page: Page[EpisodeSummary]) -> None:
    """The page of episodes, each row with an "open" button (see `opening`)."""
    ids = [e.id for e in page.items]
    rows = _rows(page.items)
    st.dataframe(
        rows,
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        column_config={
            "open": st.column_config.ButtonColumn(
                "", type="tertiary", on_click=_clicked, args=(ids,), key=_OPEN, pinned=True
            ),
            "run": st.column_config.TextColumn(
                width=text_width(rows["run"], least=80, most=_MOST_PX)
            ),
            "outcome": st.column_config.TextColumn(
                width=text_width(rows["outcome"], least=60, most=_MOST_PX)
            ),
            "tags": st.column_config.ListColumn(width=_tags_width(rows["tags"])),
            "training step": st.column_config.NumberColumn(format="%d"),
            REPLACED: st.column_config.CheckboxColumn(
                help="An earlier play of its training step: the step file was rewritten "
                "without it (a trainer resumed from a checkpoint played the step again). "
                "Training leaves it out."
            ),
            "reward": st.column_config.NumberColumn(format="%.3f"),
            "seconds": st.column_config.NumberColumn(format="%.2f"),
            "question": st.column_config.TextColumn(
                width=text_width(rows["question"], least=200, most=_QUESTION_MOST_PX)
            ),
        },
    )
