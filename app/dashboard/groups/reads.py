"""Cached Store reads of the GRPO groups view, each keyed by the store URL it reads."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.groups.signal import SignalSummary, summarise
from storage.read_models import GroupDetail, GroupKey, GroupOverview

_TTL = 5


@st.cache_data(ttl=_TTL, show_spinner=False)
def overview(url: str, run_id: int, question: str | None = None) -> GroupOverview:
    """A run's GRPO groups summed up, listing those of highest reward std (or of `question`)."""
    return data.get_store(url).group_overview(run_id, question=question)


@st.cache_data(ttl=_TTL, show_spinner=False)
def group(url: str, run_id: int, key: GroupKey) -> GroupDetail | None:
    """One group with its episodes and advantages, or None."""
    return data.get_store(url).get_group(run_id, key)


@st.cache_data(ttl=_TTL, show_spinner=False)
def signal_summary(url: str, run_id: int) -> SignalSummary:
    """The run's groups counted by where their spread comes from.

    The overview lists groups by std, highest first, so every group with a spread is listed
    when the listing is at least that long; otherwise they are read again, all of them.
    """
    found = overview(url, run_id)
    listed = found.groups
    if found.with_signal > len(listed):
        listed = data.get_store(url).group_overview(run_id, limit=found.with_signal).groups
    return summarise(
        [g for g in listed if g.std > 0.0],
        total=found.total,
        equal_all_correct=found.all_correct,
        equal_none_correct=found.all_wrong,
    )
