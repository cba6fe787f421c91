"""Runs of one sample per question have no GRPO groups: the groups page does not offer them nor
make up a group of one, and a question map click on such a cell opens its episode instead."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.dashboard.components import nav
from app.dashboard.question_map import reads as map_reads
from app.dashboard.question_map.view import cell_target
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.records import play, spec
from tests.support.stores import write_run


@dataclass(frozen=True)
class SampleStore:
    url: str
    single: int
    """A batch of one sample per question: q1 right, q2 wrong."""
    multi: int
    """A batch of two samples per question on q1 and q2."""
    evaluation: int
    """A trainer's run of one sample per question, at no training step."""


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> SampleStore:
    url = str(tmp_path_factory.mktemp("samples") / "s.db")
    store = Store(url)
    single = write_run(
        store, spec("single"), [play("q1", 0, "correct", 1.0, 2), play("q2", 0, "wrong", 0.0, 2)]
    )
    multi = write_run(
        store,
        spec("multi", samples=2),
        [
            play(q, s, "correct" if s else "wrong", float(s), 2)
            for q in ("q1", "q2")
            for s in (0, 1)
        ],
    )
    evaluation = write_run(
        store,
        spec("evaluation", kind="training"),
        [play("q1", 0, "correct", 1.0, 2), play("q2", 0, "wrong", 0.0, 2)],
    )
    store.close()
    return SampleStore(url, single, multi, evaluation)


@pytest.fixture
def samples(sample_store: SampleStore, monkeypatch: pytest.MonkeyPatch) -> SampleStore:
    serve_env(monkeypatch, sample_store.url)
    return sample_store


def test_a_link_to_a_question_of_a_one_sample_run_shows_no_group(samples: SampleStore) -> None:
    # Before: "samples 1 · std 0.000" and "Zero reward variance", a group of one made up.
    at = open_page("groups/page.py", run=str(samples.single), question="q1")
    notice = at.warning[0].value.replace("\\", "")
    assert f"single (#{samples.single}) has one sample per question, so no GRPO groups" in notice
    assert "samples" not in {m.label for m in at.metric}
    assert "Zero reward variance" not in texts(at)
    # The picker offers the runs with groups only.
    options = at.selectbox(key="gr_run").options
    assert options == [f"evaluation (#{samples.evaluation})", f"multi (#{samples.multi})"]


def test_a_question_of_a_one_sample_training_run_shows_no_group(samples: SampleStore) -> None:
    at = open_page("groups/page.py", run=str(samples.evaluation), question="q1")
    assert "evaluation has one sample per question, so no GRPO groups" in texts(at)
    assert "samples" not in {m.label for m in at.metric}
    assert "Zero reward variance" not in texts(at)


def test_a_map_cell_of_one_episode_opens_its_replay(samples: SampleStore) -> None:
    qmap = map_reads.map_view((samples.single, samples.multi), False).qmap
    runs = len(qmap.run_ids)
    row = qmap.row("q1")
    store = Store(samples.url, read_only=True)
    flt = EpisodeFilter(run_ids=(samples.single,), question_id="q1")
    [episode] = store.list_episodes(flt).items
    store.close()
    page, query, _ = cell_target(qmap, row * runs + qmap.run_ids.index(samples.single))
    assert (page, query) == (nav.REPLAY, [(nav.P_EPISODE, str(episode.id))])
    # Two samples: their group.
    page, query, _ = cell_target(qmap, row * runs + qmap.run_ids.index(samples.multi))
    assert (page, query) == (nav.GROUPS, [(nav.P_RUN, str(samples.multi)), (nav.P_QUESTION, "q1")])
