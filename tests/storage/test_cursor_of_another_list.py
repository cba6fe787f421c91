"""A page cursor belongs to the list it pages: given with other filters (a link whose run was
edited by hand, a run deleted under its page 2) it is refused, not read as a place in
another list; with the same filters it pages on, however the store grew meanwhile."""

from __future__ import annotations

import pytest

from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.stores import correct_once_each


def test_a_cursor_pages_only_the_list_it_was_made_for(store: Store) -> None:
    first = correct_once_each(store, "first", range(5))
    second = correct_once_each(store, "second", range(5))
    mine = EpisodeFilter(run_ids=(first,))
    page = store.list_episodes(mine, limit=2)
    assert page.next_cursor is not None
    following = store.list_episodes(mine, limit=2, cursor=page.next_cursor)
    assert [e.id for e in following.items] == [3, 4]
    with pytest.raises(ValueError, match="page cursor was made for other filters"):
        store.list_episodes(EpisodeFilter(run_ids=(second,)), limit=2, cursor=page.next_cursor)


def test_a_text_searchs_cursor_outlives_new_episodes(store: Store) -> None:
    correct_once_each(store, "first", range(6))
    searched = EpisodeFilter(text="q", text_newest=4)
    page = store.list_episodes(searched, limit=2, sort="id", descending=True)
    correct_once_each(store, "later", range(3))  # the newest-4 window moves on
    following = store.list_episodes(
        searched, limit=2, sort="id", descending=True, cursor=page.next_cursor
    )
    assert following.text_window == 4  # read on within the window, not refused as another list


def test_a_cursor_saved_before_cursors_carried_their_filters_still_pages(store: Store) -> None:
    from storage.cursors import encode_cursor

    run = correct_once_each(store, "first", range(5))
    older = encode_cursor(sort="id", desc=False, v=None, id=2)  # as links saved then hold
    page = store.list_episodes(EpisodeFilter(run_ids=(run,)), limit=2, cursor=older)
    assert [e.id for e in page.items] == [3, 4]
