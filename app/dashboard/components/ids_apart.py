"""The warning of the pages that pair runs by question id (Compare, the question map) where two
runs ask different questions under one id: which ids, and that they are left out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from app.dashboard.compare.stats import ids_apart_line
from app.dashboard.components.render import escape_markdown
from storage.read_models import IdApart, RunKey

LISTED = 200
"""Ids listed in the table under the warning; the count in the line is always complete."""


def show(
    apart: Sequence[IdApart],
    label: Callable[[RunKey], str],
    column: Callable[[RunKey], str],
    fate: str = "left out",
) -> None:
    """For each two sides, one line naming the ids they share but ask different questions
    under, and `fate`, what the page does with them; every such id in a table where there are
    several. `label` names a side in the line, `column` heads its column of the table."""
    pairs: dict[tuple[RunKey, RunKey], list[IdApart]] = {}
    for a in apart:
        pairs.setdefault((a.key, a.against), []).append(a)
    for (key, against), ids in pairs.items():
        line = ids_apart_line(ids, label(key), label(against), escape_markdown, fate)
        st.warning(f"{line}.", icon=":material/link_off:")
        if len(ids) > 1:
            with st.expander(f"The {len(ids):,} question ids and their questions"):
                st.dataframe(
                    pd.DataFrame(
                        [(a.question_id, a.question, a.against_question) for a in ids[:LISTED]],
                        columns=["question id", column(key), column(against)],
                    ),
                    hide_index=True,
                    width="stretch",
                )
                if len(ids) > LISTED:
                    st.caption(f"The first {LISTED} of {len(ids):,}.")
