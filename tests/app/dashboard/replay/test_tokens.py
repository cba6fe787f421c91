"""Replay's token shading: each token an escaped span with its numbers, shaded by probability
or entropy; the step's mean log-prob and entropy shown beside it."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.dashboard.components.render import BOX_PX
from app.dashboard.replay.tokens import token_html, token_tip
from app.dashboard.settings import ENV_STORE
from rollout_core.records import TokenTrace
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.control_text import ESC_SQL, ControlStore, build_control_store
from tests.support.dashboard_stores import AnalysisStore, build_analysis_store
from tests.support.personas import HOSTILE_ALTERNATIVE, HOSTILE_OUTPUT


@pytest.fixture(scope="module")
def analysis_store(tmp_path_factory: pytest.TempPathFactory) -> AnalysisStore:
    return build_analysis_store(tmp_path_factory.mktemp("analysis"))


@pytest.fixture
def fx(analysis_store: AnalysisStore, monkeypatch: pytest.MonkeyPatch) -> AnalysisStore:
    serve_env(monkeypatch, analysis_store.url)
    return analysis_store


class _Markup(HTMLParser):
    """Collects the elements, attributes and text of a piece of HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.text.append(data)


def _parse(markup: str) -> _Markup:
    parser = _Markup()
    parser.feed(markup)
    parser.close()
    return parser


def test_token_markup_holds_only_its_own_spans_and_the_output_as_text() -> None:
    pieces = ("<script>", "alert(1)", "</script>", " <img src=x onerror=alert(2)>", " &amp; \"'")
    trace = TokenTrace(
        text=pieces,
        logprobs=(-0.1, -2.0, -0.5, -4.0, 0.0),
        entropies=(0.2, 1.5, 0.3, 2.8, 0.0),
        top=((("<b>", -1.0), ('"><script>', -2.0)), (), (), (), ()),
    )
    for shade in ("probability", "entropy"):
        markup = _parse(token_html(trace, shade))
        assert {tag for tag, _ in markup.tags} == {"div", "span"}
        spans = [attrs for tag, attrs in markup.tags if tag == "span"]
        assert len(spans) == len(pieces)
        assert all(set(a) == {"class", "tabindex", "style", "data-tip"} for a in spans)
        assert "".join(markup.text) == "".join(pieces)  # the output, character for character
        tip = str(spans[0]["data-tip"])
        assert '"<b>"  p 0.368' in tip  # alternatives, literally (as JSON strings)
        assert '"\\"><script>"  p 0.135' in tip


# DOMPurify (st.html's sanitizer) drops an attribute whose value matches this (its guard
# against markup hidden in attributes); a hover tip must never match it, or it would vanish.
_DROPPED = re.compile(
    r"((--!?|])>)|<\/(style|script|title|xmp|textarea|noscript|iframe|noembed|noframes"
    r"|plaintext)",
    re.IGNORECASE,
)


@given(st.lists(st.text(alphabet="<>/-!]scriptSCRIPTtle x", max_size=12), min_size=1, max_size=4))
def test_no_hover_tip_is_one_the_sanitizer_drops(pieces: list[str]) -> None:
    trace = TokenTrace(
        text=tuple(pieces),
        logprobs=tuple(-0.5 for _ in pieces),
        top=tuple(((p, -1.0), ("</SCRIPT>-->", -2.0)) for p in pieces),
    )
    for i in range(len(pieces)):
        tip = token_tip(trace, i)
        assert not _DROPPED.search(tip), tip
        assert json.loads(tip.split(": ", 1)[1].split("\n", 1)[0]) == pieces[i]


def test_shading_follows_probability_and_entropy() -> None:
    trace = TokenTrace(text=("a", "b"), logprobs=(0.0, -5.0), entropies=(3.0, 0.0))
    by_p = [a["style"] for t, a in _parse(token_html(trace, "probability")).tags if t == "span"]
    by_h = [a["style"] for t, a in _parse(token_html(trace, "entropy")).tags if t == "span"]
    assert by_p[0] is not None and by_p[0].endswith(", 0.0)")  # certain: unshaded
    assert by_p[1] is not None and by_p[1].endswith(", 0.745)")  # p 0.007: dark
    assert by_h[0] is not None and by_h[0].endswith(", 0.75)")
    assert by_h[1] is not None and by_h[1].endswith(", 0.0)")


def test_replay_shades_a_hostile_output_as_escaped_text(fx: AnalysisStore) -> None:
    at = open_page("replay/page.py", episode=str(fx.hostile_episode), step="1")
    assert HOSTILE_OUTPUT in [c.value for c in at.code]  # the plain text is still there
    (block,) = at.get("html")
    body = block.proto.body
    assert "<script" not in body and "<img" not in body and "<b " not in body
    markup = _parse(body)
    assert {tag for tag, _ in markup.tags} == {"style", "div", "span"}
    assert "".join(markup.text) == HOSTILE_OUTPUT
    assert HOSTILE_ALTERNATIVE in str(markup.tags[2][1]["data-tip"])
    shown = texts(at)
    assert "mean log-prob" in [m.label for m in at.metric]
    assert "Hover or click a token" in shown
    assert not any("<script" in m.value for m in at.markdown)


def test_replay_shows_the_steps_mean_log_prob_and_entropy(fx: AnalysisStore) -> None:
    detail = Store(fx.url, read_only=True).get_episode(fx.solved_episode)
    assert detail is not None
    step = detail.steps[1]
    at = open_page("replay/page.py", episode=str(fx.solved_episode), step="2")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["mean log-prob"] == f"{step.mean_logprob:.3f}"
    assert metrics["mean entropy"] == f"{step.mean_entropy:.3f}"
    at.radio[0].set_value("entropy").run()
    assert "Tokens shaded by entropy" in texts(at)


def test_a_step_without_tokens_shows_no_shading(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.dashboard_stores import build_fixture_store

    plain = build_fixture_store(tmp_path_factory.mktemp("plain"))
    monkeypatch.setenv(ENV_STORE, plain.url)
    at = open_page("replay/page.py", episode=str(plain.xss_episode), step="2")
    assert not at.get("html") and "mean log-prob" not in [m.label for m in at.metric]


def _box(markup: str) -> str | None:
    (attrs,) = [a for t, a in _parse(markup).tags if t == "div"]
    return attrs.get("style")


def test_a_long_output_scrolls_in_a_box_no_taller_than_show_texts() -> None:
    # It grew the page without bound, where every other untrusted text scrolls at BOX_PX.
    line = "SELECT name FROM singer WHERE age > 30\n"
    long = TokenTrace(text=(line,) * 40, logprobs=(-0.5,) * 40)
    assert _box(token_html(long)) == f"max-height: {BOX_PX}px"


def test_control_characters_show_as_pictures_in_the_token_spans() -> None:
    trace = TokenTrace(text=("\x1b[31m", "red", "\x07", "\x7f", "\n\t"), logprobs=(-1.0,) * 5)
    markup = _parse(token_html(trace))
    assert "".join(markup.text) == "␛[31mred␇␡\n\t"
    tips = [str(a["data-tip"]) for t, a in markup.tags if t == "span"]
    assert not any(c in "".join(tips) for c in "\x1b\x07\x7f")
    assert '"␡"' in tips[3]  # JSON leaves DEL as it is; the picture shows it


@pytest.fixture(scope="module")
def control_store(tmp_path_factory: pytest.TempPathFactory) -> ControlStore:
    return build_control_store(tmp_path_factory.mktemp("control"))


def test_replay_shows_control_characters_as_pictures(
    control_store: ControlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_env(monkeypatch, control_store.url)
    at = open_page("replay/page.py", episode=str(control_store.episode), step="1")
    shown = texts(at) + "".join(h.proto.body for h in at.get("html"))
    for control in ("\x1b", "\x07", "\x7f"):
        assert control not in shown, repr(control)
    pictured = ESC_SQL.replace("\x1b", "␛").replace("\x07", "␇")
    codes = [c.value for c in at.code]
    assert any(c.endswith(pictured) for c in codes)  # raw output
    assert pictured in codes  # the parsed query
    assert "Question ␛[1mq-ctl␛[0m: which singers?" in codes  # the prompt
    assert {e.value for e in at.error} == {r'near "␛"\: syntax error'}  # player, transcript
    (block,) = at.get("html")
    body = block.proto.body
    markup = _parse(body)
    assert "".join(markup.text).endswith(pictured)
    assert markup.tags[1][1]["style"] == f"max-height: {BOX_PX}px"
    assert "overflow-y: auto" in body
