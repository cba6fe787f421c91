"""Cached Store reads of the GRPO groups view, each keyed by the store URL it reads."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.groups.signal import SignalSummary, summarise
from storage.read_models import GroupDetail, GroupKey, GroupOverview

_TTL = 5
_SUMMARY_TTL = 60
LISTED = 500
"""Groups the overview lists, highest std first."""
READ_UP_TO = 2_000
"""Groups the pages read a record of each at most, to count what the store does not count
(where each group's spread comes from, what each training step drew): a long training run
has tens of thousands, and their records cost several times the store's own overview."""


@st.cache_data(ttl=_TTL, show_spinner=False)
def overview(url: str, run_id: int, question: str | None = None) -> GroupOverview:
    """A run's GRPO groups summed up, listing those of highest reward std (or of `question`)."""
    return data.get_store(url).group_overview(run_id, limit=LISTED, question=question)


@st.cache_data(ttl=_TTL, show_spinner=False)
def group(url: str, run_id: int, key: GroupKey) -> GroupDetail | None:
    """One group with its episodes and advantages, or None."""
    return data.get_store(url).get_group(run_id, key)


@st.cache_data(ttl=_SUMMARY_TTL, show_spinner=False)
def signal_summary(url: str, run_id: int, finished: int) -> SignalSummary | None:
    """The run's groups counted by where their spread comes from, read again once the run
    has finished another episode (`finished`, its finished episodes); None when more than
    `READ_UP_TO` groups have a spread.

    The overview lists groups by std, highest first, so every group with a spread is listed
    when the listing is at least that long; otherwise they are read again, all of them.
    """
    found = overview(url, run_id)
    listed = found.groups
    if found.with_signal > len(listed):
        if found.with_signal > READ_UP_TO:
            return None
        listed = data.get_store(url).group_overview(run_id, limit=found.with_signal).groups
    return summarise(
        [g for g in listed if g.std > 0.0],
        total=found.total,
        equal_all_correct=found.all_correct,
        equal_none_correct=found.all_wrong,
    )
