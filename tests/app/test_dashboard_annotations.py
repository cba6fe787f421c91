"""Replay's labels and "continue from this step with…", the Episodes tag filter, and Compare of
an original with its fork: AppTests against real SQLite stores and a real worker process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import batch
from app.dashboard import episode_query
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.specs import RunRequest
from storage.read_models import EpisodeDetail, EpisodeFilter
from storage.store import Store
from tests.app.dashboard_store import FixtureStore, build_fixture_store
from tests.app.test_dashboard_pages import open_page, texts
from tests.fixtures import make_benchmark

WORKER_DEADLINE_S = 180.0  # a worker process imports the engine first: slow on a loaded machine
HOSTILE = "<script>alert('x')</script> **bold** [link](http://x)"


@pytest.fixture
def labelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FixtureStore:
    """A fresh fixture store (these tests write to it), served writable."""
    fixture = build_fixture_store(tmp_path)
    monkeypatch.setenv(ENV_STORE, fixture.url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return fixture


def _button(at: AppTest, label: str) -> object:
    return next(b for b in at.button if b.label == label)


def _submit(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label.startswith(label)).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# -- labels --------------------------------------------------------------------------------------


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
    at = open_page("views/replay.py", episode=str(episode))
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
        "dashboard",
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
    at = open_page("views/replay.py", episode=str(episode), step="2")
    at.selectbox(key="rp_label_tag").set_value("bad-sql")
    at.checkbox(key="rp_label_on_step").check()
    _submit(at, "Add label")
    (made,) = Store(labelled.url).annotations(episode)
    assert (made.tag, made.step) == ("bad-sql", 2)
    assert r"**bad\-sql** · step 2" in texts(at)


def test_a_note_is_shown_as_text_never_as_markdown_or_html(labelled: FixtureStore) -> None:
    Store(labelled.url).annotate(labelled.query_episode, "odd <b>tag</b>", note=HOSTILE)
    at = open_page("views/replay.py", episode=str(labelled.query_episode))
    assert HOSTILE in [c.value for c in at.code]
    assert not any("<script" in m.value or "<b>" in m.value for m in at.markdown)
    assert not at.get("html")
    assert any(r"odd \<b\>tag\</b\>" in m.value for m in at.markdown)


def test_a_missing_tag_or_long_note_is_refused_in_one_line_and_nothing_is_written(
    labelled: FixtureStore,
) -> None:
    _seed_tag(labelled, "long")
    at = open_page("views/replay.py", episode=str(labelled.query_episode))
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
    at = open_page("views/replay.py", episode=str(labelled.query_episode))
    assert "**checked** · episode" in texts(at) and "fine" in [c.value for c in at.code]
    labels = [b.label for b in at.button]
    assert "Remove" not in labels and "Add label" not in labels
    assert not any(label.startswith("Continue from step") for label in labels)
    assert "Continue from this step with…" not in texts(at)


# -- Episodes ------------------------------------------------------------------------------------


def test_episodes_filters_by_tag_from_the_url_and_shows_a_tags_column(
    labelled: FixtureStore,
) -> None:
    store = Store(labelled.url)
    store.annotate(labelled.query_episode, "look-again")
    store.annotate(labelled.xss_episode, "look-again", step=2)
    store.annotate(labelled.xss_episode, "html")
    at = open_page("views/episodes.py", tag="look-again")
    rows = at.dataframe[0].value
    assert sorted(rows["id"]) == sorted([labelled.query_episode, labelled.xss_episode])
    tags = dict(zip(rows["id"], rows["tags"], strict=True))
    assert list(tags[labelled.xss_episode]) == ["html", "look-again"]
    assert at.multiselect(key="ep_tags").value == ["look-again"]
    assert set(at.multiselect(key="ep_tags").options) == {"look-again", "html"}
    # Picking another tag writes the URL, as every filter does.
    at.multiselect(key="ep_tags").set_value(["html"]).run()
    assert at.query_params["tag"] == "html"
    assert list(at.dataframe[0].value["id"]) == [labelled.xss_episode]


def test_the_tag_filter_is_list_state_replay_carries() -> None:
    query, problems = episode_query.from_query_string("run=3&tag=a&tag=b%20c", {3})
    assert problems == [] and query.flt.tags == ("a", "b c")
    assert episode_query.to_query_string(query) == "run=3&tag=a&tag=b+c"


# -- forks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    url: str
    run_id: int
    source: EpisodeDetail
    """A sample-1 episode with at least three steps (the fork takes over at step 2)."""


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """A store holding a real `random` run (two samples per question), served writable."""
    questions, db_dir = make_benchmark(tmp_path / "bench")
    url = str(tmp_path / "store.db")
    store = Store(url)
    request = RunRequest(
        policy="random", questions=str(questions), db_dir=str(db_dir), samples=2, name="rnd"
    )
    run_id, prepared = batch.start_run(store, request)
    batch.play_run(store, run_id, prepared)
    source = next(
        d
        for d in store.iter_episode_details(run_id)
        if d.summary.sample_index == 1 and len(d.steps) >= 3
    )
    store.close()
    monkeypatch.setenv(ENV_STORE, url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.setenv(ENV_CHECKPOINT_ROOTS, str(tmp_path / "models"))
    yield Recorded(url, run_id, source)


def _wait_finished(store: Store, run_id: int) -> str:
    deadline = time.monotonic() + WORKER_DEADLINE_S
    while time.monotonic() < deadline:
        run = store.get_run(run_id)
        assert run is not None
        if run.status not in ("queued", "running"):
            return run.status
        time.sleep(0.5)
    pytest.fail(f"the fork's worker did not finish run {run_id} in {WORKER_DEADLINE_S:.0f}s")


def test_replay_forks_the_episode_at_the_step_shown_and_compare_aligns_them(
    recorded: Recorded,
) -> None:
    source = recorded.source
    at = open_page("views/replay.py", episode=str(source.summary.id), step="2")
    assert at.selectbox(key="rp_fork_policy").value == "random"  # the source's own policy
    at.selectbox(key="rp_fork_policy").set_value("oracle")
    at.number_input(key="rp_fork_temperature").set_value(0.5)
    _submit(at, "Continue from step 2")
    store = Store(recorded.url)
    fork = store.list_runs()[0]
    assert fork.kind == "fork" and fork.id != recorded.run_id
    assert any(f"Fork run #{fork.id} queued from step 2" in s.value for s in at.success)
    assert fork.spec["policy"] == "oracle"
    assert fork.spec["generation"]["temperature"] == 0.5
    assert _wait_finished(store, fork.id) == "completed"
    (played,) = store.list_episodes(EpisodeFilter(run_ids=(fork.id,))).items
    assert (played.forked_from, played.fork_step, played.outcome) == (
        source.summary.id,
        2,
        "correct",
    )
    detail = store.get_episode(played.id)
    assert detail is not None
    assert detail.steps[0].replayed and not detail.steps[1].replayed
    assert detail.steps[0].argument == source.steps[0].argument

    at = open_page(
        "views/compare.py",
        run=[str(recorded.run_id), str(fork.id)],
        question=source.summary.question_id,
    )
    # The original's column shows the episode the fork continues (sample 1, not sample 0).
    assert at.selectbox(key=f"cmp_sample_{recorded.run_id}").value == 1
    shown = texts(at)
    assert f"continues rnd's episode {source.summary.id} from step 2" in shown
    assert "step 1 replayed as recorded, so the two can differ only from step 2" in shown
    assert any("Step 2" in m.value and "fork:" in m.value for m in at.markdown)
    assert any("replayed" in c.value for c in at.caption)

    # The fork's own episode links back to its source and to both side by side.
    at = open_page("views/replay.py", episode=str(played.id))
    assert f"continues episode {source.summary.id} from step 2" in texts(at)


def test_a_fork_with_a_checkpoint_outside_the_roots_is_refused_under_its_field(
    recorded: Recorded,
) -> None:
    at = open_page("views/replay.py", episode=str(recorded.source.summary.id), step="2")
    at.selectbox(key="rp_fork_policy").set_value("other checkpoint directory...")
    at.text_input(key="rp_fork_checkpoint").set_value("/etc")
    at.number_input(key="rp_fork_temperature").set_value(3.0)
    _submit(at, "Continue from step 2")
    shown = texts(at)
    assert "outside the checkpoint roots" in shown
    assert "temperature must be between 0 and 2, got 3" in shown
    assert [r.id for r in Store(recorded.url).list_runs()] == [recorded.run_id]
