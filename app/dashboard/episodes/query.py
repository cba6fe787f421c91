"""The Episodes list as URL state: filters, order, page size and page, read and written the
same way by Episodes (its widgets), Replay (the list it came from) and the export."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args
from urllib.parse import parse_qs, urlencode

from app.dashboard.components import nav
from app.dashboard.components.params import (
    TRISTATE,
    Codec,
    choice,
    choices,
    flag,
    ids,
    number,
    text,
    texts,
    tristate,
    whole,
)
from rollout_core.records import FAILURE_CLASSES, OUTCOMES
from storage.read_models import EpisodeFilter, EpisodeSort, EpisodeSummary, Page
from storage.reads import TEXT_SEARCH_NEWEST

PAGE_SIZES = (10, 25, 50, 100, 200)
DEFAULT_SIZE = 50
SORTS: tuple[EpisodeSort, ...] = get_args(EpisodeSort)


@dataclass(frozen=True, slots=True)
class Field:
    """One bound control of the list: its widget key and query parameter."""

    key: str
    param: str
    codec: Callable[[Collection[int]], Codec[Any]]
    """Built from the store's run ids (only the run filter needs them)."""


FIELDS: tuple[Field, ...] = (
    Field("ep_runs", nav.P_RUN, lambda known: ids(nav.P_RUN, known)),
    Field("ep_outcomes", "outcome", lambda _: choices("outcome", OUTCOMES, "an outcome")),
    Field("ep_classes", "class", lambda _: choices("class", FAILURE_CLASSES, "a failure class")),
    Field("ep_dbs", "db", lambda _: texts("db")),
    Field("ep_tags", "tag", lambda _: texts("tag")),
    Field("ep_text", "q", lambda _: text("q")),
    Field("ep_text_all", "qall", lambda _: flag("qall", "a yes/no")),
    Field("ep_rmin", "rmin", lambda _: number("rmin", float, "a number")),
    Field("ep_rmax", "rmax", lambda _: number("rmax", float, "a number")),
    Field("ep_smin", "smin", lambda _: whole("smin", "a step count")),
    Field("ep_smax", "smax", lambda _: whole("smax", "a step count")),
    Field("ep_tmin", nav.P_TRAIN_FROM, lambda _: whole(nav.P_TRAIN_FROM, "a training step")),
    Field("ep_tmax", nav.P_TRAIN_TO, lambda _: whole(nav.P_TRAIN_TO, "a training step")),
    Field("ep_sqlerr", "sqlerr", lambda _: tristate("sqlerr", "a yes/no")),
    Field("ep_unparsed", "unparsed", lambda _: tristate("unparsed", "a yes/no")),
    Field("ep_sort", "sort", lambda _: choice("sort", SORTS, "id", "a sort order")),
    Field("ep_desc", "desc", lambda _: flag("desc", "a yes/no")),
    Field("ep_size", "size", lambda _: choice("size", PAGE_SIZES, DEFAULT_SIZE, "a page size")),
)
BY_KEY = {f.key: f for f in FIELDS}


@dataclass(frozen=True, slots=True)
class ListQuery:
    """What the Episodes page lists: filter, order, page size, and the cursors of the pages
    before the one shown."""

    flt: EpisodeFilter = field(default_factory=EpisodeFilter)
    sort: EpisodeSort = "id"
    descending: bool = False
    size: int = DEFAULT_SIZE
    cursors: tuple[str, ...] = ()

    @property
    def cursor(self) -> str | None:
        """The cursor of the page shown (None: the first page)."""
        return self.cursors[-1] if self.cursors else None


class WidgetValues(Protocol):
    """What `from_values` reads: `st.session_state`, or a plain dict in tests."""

    def __getitem__(self, key: str) -> Any: ...


def from_values(values: WidgetValues, cursors: tuple[str, ...] = ()) -> ListQuery:
    """The query for widget values keyed by widget key (`ep_runs`, ...)."""
    return ListQuery(
        flt=EpisodeFilter(
            run_ids=tuple(values["ep_runs"]),
            outcomes=tuple(values["ep_outcomes"]),
            failure_classes=tuple(values["ep_classes"]),
            db_ids=tuple(values["ep_dbs"]),
            tags=tuple(values["ep_tags"]),
            text=values["ep_text"].strip() or None,
            text_newest=None if values["ep_text_all"] else TEXT_SEARCH_NEWEST,
            min_reward=values["ep_rmin"],
            max_reward=values["ep_rmax"],
            min_steps=None if values["ep_smin"] is None else int(values["ep_smin"]),
            max_steps=None if values["ep_smax"] is None else int(values["ep_smax"]),
            min_train_step=None if values["ep_tmin"] is None else int(values["ep_tmin"]),
            max_train_step=None if values["ep_tmax"] is None else int(values["ep_tmax"]),
            has_sql_error=TRISTATE[values["ep_sqlerr"]],
            has_unparsed=TRISTATE[values["ep_unparsed"]],
        ),
        sort=values["ep_sort"],
        descending=bool(values["ep_desc"]),
        size=int(values["ep_size"]),
        cursors=cursors,
    )


def parse(
    query: Mapping[str, list[str]], known_runs: Collection[int]
) -> tuple[ListQuery, list[str]]:
    """A list query from URL parameters, and notices about values that were ignored."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in FIELDS:
        value, found = f.codec(known_runs).parse(list(query.get(f.param, [])))
        values[f.key] = value
        problems += found
    cursors = tuple(v for v in query.get(nav.P_CURSOR, []) if v.strip())
    return from_values(values, cursors), problems


def to_params(q: ListQuery, known_runs: Collection[int] = ()) -> list[tuple[str, str]]:
    """URL parameters naming the list query (defaults left out)."""
    f = q.flt
    _tri = {True: "yes", False: "no", None: "any"}
    values: dict[str, Any] = {
        "ep_runs": list(f.run_ids),
        "ep_outcomes": list(f.outcomes),
        "ep_classes": list(f.failure_classes),
        "ep_dbs": list(f.db_ids),
        "ep_tags": list(f.tags),
        "ep_text": f.text or "",
        "ep_text_all": f.text_newest is None,
        "ep_rmin": f.min_reward,
        "ep_rmax": f.max_reward,
        "ep_smin": f.min_steps,
        "ep_smax": f.max_steps,
        "ep_tmin": f.min_train_step,
        "ep_tmax": f.max_train_step,
        "ep_sqlerr": _tri[f.has_sql_error],
        "ep_unparsed": _tri[f.has_unparsed],
        "ep_sort": q.sort,
        "ep_desc": q.descending,
        "ep_size": q.size,
    }
    out = [(fl.param, v) for fl in FIELDS for v in fl.codec(known_runs).dump(values[fl.key])]
    return out + [(nav.P_CURSOR, c) for c in q.cursors]


def to_query_string(q: ListQuery) -> str:
    """`run=3&sort=reward&desc=1`: the Episodes page's query string for this list."""
    return urlencode(to_params(q))


def from_query_string(qs: str, known_runs: Collection[int]) -> tuple[ListQuery, list[str]]:
    """The list query a Replay link carries in `from` (see `to_query_string`)."""
    return parse(parse_qs(qs, keep_blank_values=False), known_runs)


Lister = Callable[[ListQuery], Page[EpisodeSummary]]
"""Reads one page of the list (the dashboard's cached `episodes.reads.list_page`)."""


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The episode before or after the current one in the list, and the list page holding it."""

    episode_id: int
    query: ListQuery


def neighbours(
    read: Lister, q: ListQuery, episode_id: int
) -> tuple[Neighbour | None, Neighbour | None]:
    """Previous and next episode around `episode_id` in the listed page and its neighbours;
    (None, None) when the episode is not on that page (the list changed since)."""
    page = read(q)
    ids_ = [e.id for e in page.items]
    if episode_id not in ids_:
        return None, None
    i = ids_.index(episode_id)
    prev: Neighbour | None = None
    nxt: Neighbour | None = None
    if i > 0:
        prev = Neighbour(ids_[i - 1], q)
    elif q.cursors:
        before = ListQuery(q.flt, q.sort, q.descending, q.size, q.cursors[:-1])
        items = read(before).items
        prev = Neighbour(items[-1].id, before) if items else None
    if i + 1 < len(ids_):
        nxt = Neighbour(ids_[i + 1], q)
    elif page.next_cursor is not None:
        after = ListQuery(q.flt, q.sort, q.descending, q.size, (*q.cursors, page.next_cursor))
        items = read(after).items
        nxt = Neighbour(items[0].id, after) if items else None
    return prev, nxt
