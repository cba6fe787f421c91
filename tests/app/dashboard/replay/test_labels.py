"""Replay's labels through AppTest on a fresh store: added, removed, shown as text."""

from __future__ import annotations

import getpass

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import ENV_READ_ONLY
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.dashboard_stores import FixtureStore

HOSTILE = "<script>alert('x')</script> **bold** [link](http://x)"


def _button(at: AppTest, label: str) -> object:
    return next(b for b in at.button if b.label == label)


def _submit(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label.startswith(label)).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _seed_tag(fixture: FixtureStore, tag: str) -> None:
    """Put `tag` in the run's tag list through another episode of the run. (A new tag is typed
    into the select box in the browser test: AppTest cannot type a new option.)"""
    store = Store(fixture.url)
    other = store.list_episodes(EpisodeFilter(run_ids=(fixture.run_a,))).items[-1]
    assert other.id != fixture.query_episode
    store.annotate(other.id, tag)


def test_replay_labels_the_episode_and_removes_the_label(labelled: FixtureStore) -> None:
    episode = labelled.query_episode
    _seed_tag(labelled, "wrong-join")
    at = open_page("replay/page.py", episode=str(episode))
    assert "No labels yet." in texts(at)
    assert at.selectbox(key="rp_label_tag").options == ["wrong-join"]
    at.selectbox(key="rp_label_tag").set_value("wrong-join")
    at.text_area(key="rp_label_note").set_value("joined on the wrong key")
    _submit(at, "Add label")
    store = Store(labelled.url)
    (made,) = store.annotations(episode)
    assert (made.tag, made.note, made.step, made.author) == (
        "wrong-join",
        "joined on the wrong key",
        None,
        getpass.getuser(),  # the dashboard's user, never "dashboard" (issue 31, polish)
    )
    assert r"**wrong\-join** · episode" in texts(at)
    assert "joined on the wrong key" in [c.value for c in at.code]
    assert at.selectbox(key="rp_label_tag").value is None  # the form starts afresh
    _submit(at, "Remove")
    assert store.annotations(episode) == []
    assert "No labels yet." in texts(at)


def test_replay_labels_the_step_shown(labelled: FixtureStore) -> None:
    episode = labelled.query_episode
    _seed_tag(labelled, "bad-sql")
    at = open_page("replay/page.py", episode=str(episode), step="2")
    at.selectbox(key="rp_label_tag").set_value("bad-sql")
    at.checkbox(key="rp_label_on_step").check()
    _submit(at, "Add label")
    (made,) = Store(labelled.url).annotations(episode)
    assert (made.tag, made.step) == ("bad-sql", 2)
    assert r"**bad\-sql** · step 2" in texts(at)


def test_a_note_is_shown_as_text_never_as_markdown_or_html(labelled: FixtureStore) -> None:
    Store(labelled.url).annotate(labelled.query_episode, "odd <b>tag</b>", note=HOSTILE)
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    assert HOSTILE in [c.value for c in at.code]
    assert not any("<script" in m.value or "<b>" in m.value for m in at.markdown)
    assert not at.get("html")
    assert any(r"odd \<b\>tag\</b\>" in m.value for m in at.markdown)


def test_a_missing_tag_or_long_note_is_refused_in_one_line_and_nothing_is_written(
    labelled: FixtureStore,
) -> None:
    _seed_tag(labelled, "long")
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    _submit(at, "Add label")
    assert any("the tag is empty" in e.value for e in at.error)
    at.selectbox(key="rp_label_tag").set_value("long")
    at.text_area(key="rp_label_note").set_value("x" * 10_001)
    _submit(at, "Add label")
    assert any("the note is 10001 characters long" in e.value for e in at.error)
    assert Store(labelled.url).annotations(labelled.query_episode) == []


def test_read_only_replay_shows_labels_without_any_writing_control(
    labelled: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    Store(labelled.url).annotate(labelled.query_episode, "checked", note="fine")
    monkeypatch.setenv(ENV_READ_ONLY, "1")
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    assert "**checked** · episode" in texts(at) and "fine" in [c.value for c in at.code]
    labels = [b.label for b in at.button]
    assert "Remove" not in labels and "Add label" not in labels
    assert not any(label.startswith("Continue from step") for label in labels)
    assert "Continue from this step with…" not in texts(at)


def test_a_label_is_recorded_as_the_name_typed(labelled: FixtureStore) -> None:
    # Issue 31, polish: every label was authored as "dashboard".
    _seed_tag(labelled, "look-again")
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    assert at.text_input(key="rp_label_author").value == getpass.getuser()
    at.selectbox(key="rp_label_tag").set_value("look-again")
    at.text_input(key="rp_label_author").set_value("ada")
    _submit(at, "Add label")
    (made,) = Store(labelled.url).annotations(labelled.query_episode)
    assert made.author == "ada"
    assert "ada, " in texts(at)
