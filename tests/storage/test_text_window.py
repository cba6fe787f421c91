"""A text search bounded to the newest episodes the other filters select (`text_newest`): the
bound applies to texts the index cannot narrow (`storage.text_search`): here, every text."""

from __future__ import annotations

import pytest

from storage import text_search
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.records import play, spec


@pytest.fixture(autouse=True)
def _no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_search, "candidates", lambda *_: None)


@pytest.fixture
def two_runs(store: Store) -> tuple[Store, int, int, dict[int, int]]:
    """Run A: 12 episodes, then run B: 5; "needle" in A's 1st, 6th and 12th and B's 3rd.
    Returns the store, both run ids, and (position in the store, 1-based) -> episode id."""
    a = store.create_run(spec("run-a"), episodes_planned=12)
    b = store.create_run(spec("run-b"), episodes_planned=5)
    needles = {1, 6, 12, 15}
    for n in range(1, 18):
        run, q = (a, f"a{n}") if n <= 12 else (b, f"b{n}")
        raw = "QUERY SELECT needle FROM t" if n in needles else ""
        store.sink(run).write(play(q, 0, "wrong", 0.0, 1, raw=raw))
    listed = store.list_episodes(EpisodeFilter(), limit=100).items
    ids = {n: e.id for n, e in enumerate(sorted(listed, key=lambda e: e.id), start=1)}
    return store, a, b, ids


def _hits(store: Store, flt: EpisodeFilter) -> tuple[list[int], int | None, int | None]:
    page = store.list_episodes(flt, limit=2, with_total=True)
    ids, cursor = [e.id for e in page.items], page.next_cursor
    while cursor is not None:  # every page, so the bound holds past the first
        more = store.list_episodes(flt, limit=2, cursor=cursor)
        ids, cursor = ids + [e.id for e in more.items], more.next_cursor
    return ids, page.total, page.text_window


def test_unbounded_search_reads_every_episode(
    two_runs: tuple[Store, int, int, dict[int, int]],
) -> None:
    store, _, _, ids = two_runs
    hits = [ids[n] for n in (1, 6, 12, 15)]
    assert _hits(store, EpisodeFilter(text="needle")) == (hits, 4, None)


def test_a_bounded_search_reads_the_newest_episodes_only(
    two_runs: tuple[Store, int, int, dict[int, int]],
) -> None:
    store, a, _, ids = two_runs
    # The newest three of the store are B's last three: one needle among them.
    assert _hits(store, EpisodeFilter(text="needle", text_newest=3)) == ([ids[15]], 1, 3)
    # The newest three of run A alone: its 10th to 12th.
    flt = EpisodeFilter(run_ids=(a,), text="needle", text_newest=3)
    assert _hits(store, flt) == ([ids[12]], 1, 3)
    # A window that covers the whole run leaves nothing out: no window to report.
    flt = EpisodeFilter(run_ids=(a,), text="needle", text_newest=12)
    assert _hits(store, flt) == ([ids[1], ids[6], ids[12]], 3, None)


def test_the_window_counts_the_episodes_of_the_other_filters(
    two_runs: tuple[Store, int, int, dict[int, int]],
) -> None:
    store, a, b, ids = two_runs
    # Sorted by id descending, across both runs: the newest 13 start at A's 5th.
    flt = EpisodeFilter(run_ids=(a, b), text="needle", text_newest=13)
    page = store.list_episodes(flt, sort="id", descending=True, limit=10, with_total=True)
    assert [e.id for e in page.items] == [ids[15], ids[12], ids[6]]
    assert (page.total, page.text_window) == (3, 13)


def test_without_text_the_bound_does_nothing(
    two_runs: tuple[Store, int, int, dict[int, int]],
) -> None:
    store, _, _, _ = two_runs
    page = store.list_episodes(EpisodeFilter(text_newest=2), limit=100, with_total=True)
    assert (len(page.items), page.total, page.text_window) == (17, 17, None)


def test_a_bound_below_one_is_refused(two_runs: tuple[Store, int, int, dict[int, int]]) -> None:
    store, _, _, _ = two_runs
    with pytest.raises(ValueError, match="text_newest must be at least 1"):
        store.list_episodes(EpisodeFilter(text="needle", text_newest=0))


def test_min_id_keeps_that_episode_and_later_ones(
    two_runs: tuple[Store, int, int, dict[int, int]],
) -> None:
    store, a, _, ids = two_runs
    page = store.list_episodes(EpisodeFilter(min_id=ids[11]), limit=100, with_total=True)
    assert [e.id for e in page.items] == [ids[n] for n in range(11, 18)] and page.total == 7
    # With a window too: the later of the two starts holds.
    flt = EpisodeFilter(run_ids=(a,), text="needle", text_newest=12, min_id=ids[6])
    assert _hits(store, flt) == ([ids[6], ids[12]], 2, None)


def test_a_text_the_index_narrows_is_searched_in_every_episode(
    two_runs: tuple[Store, int, int, dict[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, a, _, ids = two_runs
    monkeypatch.undo()  # the index back
    hits = [ids[n] for n in (1, 6, 12, 15)]
    assert _hits(store, EpisodeFilter(text="needle", text_newest=3)) == (hits, 4, None)
    flt = EpisodeFilter(run_ids=(a,), text="needle", text_newest=3)
    assert _hits(store, flt) == (hits[:3], 3, None)
