"""The URL is the page state: typed query parameters, widgets bound to them, and notices.

A bound widget follows one rule (see `bind`): the URL seeds the widget only when the URL changed
from outside (a link, a reload, browser Back), and only the widget's own change callback writes
the URL. Seeding on every run and writing after the widget makes Streamlit answer every other
pick with the previous URL value. Nothing writes the URL while a page loads:
each write is a browser history entry, and a write on load would trap browser Back on the page.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import streamlit as st

from storage.models import BIG_INTEGER_RANGE, INTEGER_RANGE

T = TypeVar("T")
N = TypeVar("N", int, float)

_SEEN = "_url_seen:"
"""Session-state prefix: the URL values a bound widget was last synchronised with."""
_NOTICES = "_url_notices"
_TAKEN = "_url_taken"
"""Session-state key: the query parameters the page shown takes (`expect`)."""


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How one query parameter reads into a widget value and back."""

    parse: Callable[[list[str]], tuple[T, list[str]]]
    """URL values -> (value, notices about values that were ignored)."""
    dump: Callable[[T], list[str]]
    """Value -> URL values; [] leaves the parameter out (the default's clean URL)."""


# -- reading -------------------------------------------------------------------------------------


def raw(name: str) -> list[str]:
    """Every value of a query parameter as the URL has it."""
    return list(st.query_params.get_all(name))


def get_str(name: str) -> str | None:
    """A query parameter as text (its last value), None when absent or blank."""
    values = [v.strip() for v in raw(name) if v.strip()]
    return values[-1] if values else None


def get_id(name: str, what: str) -> int | None:
    """A positive integer id (`episode=812`); a notice and None when it is not one."""
    value = get_str(name)
    if value is None:
        return None
    # isdecimal, not isdigit: int() refuses a digit such as '²'.
    if not value.isdecimal() or not 1 <= int(value) < BIG_INTEGER_RANGE.stop:
        notice(f"{name}={value!r} in the link is not {what}; ignored.")
        return None
    return int(value)


def get_all(name: str) -> list[str]:
    """Every non-blank value of a repeated query parameter."""
    return [v.strip() for v in raw(name) if v.strip()]


def expect(*names: str) -> None:
    """Note each query parameter of the URL that the page does not read (`runs=` for `run=`),
    with the one it likely means: a link's typo is otherwise ignored without a word. The
    page's next change of the URL (`write`) leaves them out."""
    st.session_state[_TAKEN] = names
    for name in st.query_params:  # Streamlit's own (`embed`) are not listed
        if name in names:
            continue
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]}=?" if close else f"it reads {', '.join(names) or 'none'}"
        notice(f"{name}= in the link is not a parameter of this page ({hint}); ignored.")


# -- writing -------------------------------------------------------------------------------------


def write(name: str, values: Sequence[str]) -> None:
    """Set (or, with no values, remove) a query parameter, only when it changes; parameters
    the page does not take (see `expect`) go with that change, in the same history entry."""
    values = list(values)
    taken = st.session_state.get(_TAKEN)
    stray = [k for k in st.query_params if taken is not None and k not in taken]
    if stray:
        query = {k: st.query_params.get_all(k) for k in st.query_params if k not in stray}
        query.pop(name, None)
        if values:
            query[name] = values
        st.query_params.from_dict(query)
        return
    if raw(name) == values:
        return
    if not values:
        del st.query_params[name]
    else:
        st.query_params[name] = values if len(values) > 1 else values[0]


def bind(
    key: str, name: str, codec: Codec[Any], *, on_change: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Widget keyword arguments (`key`, `on_change`) that bind the widget to query parameter
    `name`: seeded from the URL when the URL changed from outside, written to it on change.

    Use as `st.selectbox("Sort", options, **params.bind("ep_sort", "sort", codec))`.
    """
    values = raw(name)
    value, problems = codec.parse(values)
    for problem in problems:
        notice(problem)
    seen = _SEEN + key
    if key not in st.session_state or st.session_state.get(seen) != values:
        st.session_state[key] = value
        st.session_state[seen] = values

    def changed() -> None:
        _store(key, name, codec, st.session_state[key])
        if on_change is not None:
            on_change()

    return {"key": key, "on_change": changed}


def assign(key: str, name: str, codec: Codec[T], value: T) -> None:
    """Set a bound widget's value and the URL together (in a callback, or before the widget)."""
    st.session_state[key] = value
    _store(key, name, codec, value)


def forget(key: str, name: str) -> None:
    """Drop a bound widget's value and its parameter, so the page picks its default again."""
    write(name, [])
    st.session_state.pop(key, None)
    st.session_state.pop(_SEEN + key, None)


def _store(key: str, name: str, codec: Codec[T], value: T) -> None:
    values = codec.dump(value)
    write(name, values)
    st.session_state[_SEEN + key] = values


# -- notices -------------------------------------------------------------------------------------


def notice(message: str) -> None:
    """Note a bad query parameter; `show_notices` prints each once, one line each."""
    found: list[str] = st.session_state.setdefault(_NOTICES, [])
    if message not in found:
        found.append(message)


def show_notices(where: Any = None) -> None:
    """Print the notices gathered in this run, one line each, in one box (into `where`, e.g.
    a container at the top). They quote the URL, so they are escaped: a link is user text."""
    from app.dashboard.components.render import escape_markdown

    found: list[str] = st.session_state.pop(_NOTICES, [])
    if found:
        target = st if where is None else where
        target.warning("  \n".join(escape_markdown(m) for m in found), icon=":material/link_off:")


def clear_notices() -> None:
    """Forget notices left by an earlier run (each page calls it first)."""
    st.session_state.pop(_NOTICES, None)


# -- codecs --------------------------------------------------------------------------------------


def ids(name: str, known: Collection[int], what: str = "run") -> Codec[list[int]]:
    """A repeated id parameter (`run=3&run=4`, or as people type it, `run=3,4`); ids not in
    `known` are noted and dropped."""

    def parse(values: list[str]) -> tuple[list[int], list[str]]:
        out: list[int] = []
        problems: list[str] = []
        for v in (x.strip() for value in values for x in value.split(",") if x.strip()):
            if not v.isdecimal():
                problems.append(f"{name}={v!r} in the link is not a {what} id; ignored.")
            elif int(v) not in known:
                problems.append(f"No {what} with id {v} in this store; ignored.")
            elif int(v) not in out:
                out.append(int(v))
        return out, problems

    return Codec(parse, lambda value: [str(i) for i in value])


def choice(name: str, options: Sequence[T], default: T, what: str) -> Codec[T]:
    """One value out of `options` (compared as text); anything else notes and falls back."""
    by_text = {str(o): o for o in options}
    shown = _listed(list(options))

    def parse(values: list[str]) -> tuple[T, list[str]]:
        given = [v.strip() for v in values if v.strip()]
        if not given:
            return default, []
        if given[-1] in by_text:
            return by_text[given[-1]], []
        return default, [
            f"{name}={given[-1]!r} in the link is not {what} ({shown}); showing {default}."
        ]

    return Codec(parse, lambda value: [] if value == default else [str(value)])


def _listed(options: Sequence[object]) -> str:
    """The options a notice names: `1-12` for a run of whole numbers, else a few by name."""
    if len(options) > 2 and all(isinstance(o, int) for o in options):
        numbers = [int(str(o)) for o in options]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, options)) if len(options) <= 8 else f"{len(options)} choices"


def choices(name: str, options: Sequence[str], what: str) -> Codec[list[str]]:
    """A repeated value out of `options` (`outcome=wrong&outcome=error`, or `wrong,error`);
    others are noted and dropped."""

    def parse(values: list[str]) -> tuple[list[str], list[str]]:
        given = (x.strip() for value in values for x in value.split(","))
        out = [v for v in dict.fromkeys(given) if v]
        bad = [v for v in out if v not in options]
        problems = [f"{name}={v!r} in the link is not {what}; ignored." for v in bad]
        return [v for v in out if v in options], problems

    return Codec(parse, list)


def texts(name: str) -> Codec[list[str]]:
    """A repeated free-text value (`db=concerts&db=pets`)."""

    def parse(values: list[str]) -> tuple[list[str], list[str]]:
        return list(dict.fromkeys(v.strip() for v in values if v.strip())), []

    return Codec(parse, list)


def text(name: str) -> Codec[str]:
    """Free text; blank leaves the parameter out."""

    def parse(values: list[str]) -> tuple[str, list[str]]:
        return (values[-1] if values else ""), []

    return Codec(parse, lambda value: [value] if value.strip() else [])


def number(
    name: str, kind: type[N], what: str, minimum: N | None = None, maximum: N | None = None
) -> Codec[N | None]:
    """An optional number (None when absent); a bad one, or one outside `minimum`..`maximum`,
    is noted and left out."""

    def parse(values: list[str]) -> tuple[N | None, list[str]]:
        given = [v.strip() for v in values if v.strip()]
        if not given:
            return None, []
        try:
            value = kind(given[-1])
        except ValueError:
            return None, [f"{name}={given[-1]!r} in the link is not {what}; ignored."]
        if (
            value != value  # NaN
            or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)
        ):
            return None, [f"{name}={given[-1]!r} in the link is not {what}; ignored."]
        return value, []

    def dump(value: N | None) -> list[str]:
        if value is None:
            return []
        return [str(int(value))] if float(value).is_integer() else [str(value)]

    return Codec(parse, dump)


def whole(name: str, what: str) -> Codec[int | None]:
    """An optional count or training step: 0 or more, within what the store's integers hold."""
    return number(name, int, what, 0, INTEGER_RANGE.stop - 1)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(name: str, what: str) -> Codec[bool]:
    """On/off (`desc=1`); off leaves the parameter out."""

    def parse(values: list[str]) -> tuple[bool, list[str]]:
        given = [v.strip().lower() for v in values if v.strip()]
        if not given:
            return False, []
        if given[-1] in _TRUE or given[-1] in _FALSE:
            return given[-1] in _TRUE, []
        return False, [f"{name}={given[-1]!r} in the link is not {what} (1 or 0); ignored."]

    return Codec(parse, lambda value: ["1"] if value else [])


TRISTATE: dict[str, bool | None] = {"any": None, "yes": True, "no": False}


def tristate(name: str, what: str) -> Codec[str]:
    """`any` / `yes` / `no` as a widget choice, `1` / `0` / absent in the URL."""

    def parse(values: list[str]) -> tuple[str, list[str]]:
        given = [v.strip().lower() for v in values if v.strip()]
        if not given:
            return "any", []
        if given[-1] in _TRUE:
            return "yes", []
        if given[-1] in _FALSE:
            return "no", []
        return "any", [f"{name}={given[-1]!r} in the link is not {what} (1 or 0); ignored."]

    return Codec(parse, lambda value: {"yes": ["1"], "no": ["0"]}.get(value, []))
