"""GRPO groups of runs whose episodes carry a training step but no group number (an
environment server's, a Recorder's given no step for some): each group the overview lists
opens as that group, by its step (`at=`), from the page's link, Replay's and the question map's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.dashboard.components import nav
from app.dashboard.question_map import reads as map_reads
from app.dashboard.question_map.view import cell_target
from app.recorder import Recorder
from storage.read_models import EpisodeFilter, EpisodeSummary, RunStep
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.storage.test_store_groups_by_step import served_episode
from tests.support.records import spec
from tests.support.stores import write_run

# training step -> rewards of q1's samples at it; step 3's one sample is no group
_SERVED = {0: [1.0, 1.0], 1: [0.0, 0.0], 2: [1.0, 0.0], 3: [1.0]}
_QUESTION = "How many singers?"


@dataclass(frozen=True)
class SteppedStore:
    url: str
    served: int
    """An environment server's run (`_SERVED`): a training step, no group number."""
    tools: int
    """A trainer's run of the same episodes: a training step, no group number."""
    mixed: int
    """A Recorder's training run: three samples at no step, two at step 3 (a numbered group)."""


@pytest.fixture(scope="module")
def stepped_store(tmp_path_factory: pytest.TempPathFactory) -> SteppedStore:
    url = str(tmp_path_factory.mktemp("stepped") / "store.db")
    store = Store(url)
    samples = [(s, r) for s, rewards in _SERVED.items() for r in rewards]
    batches = [served_episode("q1", i, r, s) for i, (s, r) in enumerate(samples)]
    served = write_run(store, spec("served", kind="env"), batches)
    tools = write_run(store, spec("tools", kind="training"), batches)
    store.close()
    turns = [{"role": "assistant", "content": "ANSWER 6"}]
    with Recorder(url, run="mixed", kind="training") as rec:
        for reward, at in ((1.0, None), (0.0, None), (0.0, None), (1.0, 3), (0.0, 3)):
            rec.episode(question=_QUESTION, turns=turns, reward=reward, step=at)
    read = Store(url, read_only=True)
    mixed = read.run_named("mixed")
    read.close()
    assert mixed is not None
    return SteppedStore(url, served, tools, mixed.id)


@pytest.fixture
def stepped(stepped_store: SteppedStore, monkeypatch: pytest.MonkeyPatch) -> SteppedStore:
    serve_env(monkeypatch, stepped_store.url)
    return stepped_store


def _episodes(url: str, run_id: int) -> list[EpisodeSummary]:
    store = Store(url, read_only=True)
    try:
        return store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=50).items
    finally:
        store.close()


def test_a_served_runs_groups_are_listed_by_step(stepped: SteppedStore) -> None:
    at = open_page("groups/page.py", run=str(stepped.served))
    table = at.dataframe[0].value
    assert "Groups by reward variance" in [h.value for h in at.subheader]
    # Before: no step column, and four rows of q1 that each opened all its samples.
    assert sorted(zip(table["training step"], table["samples"], strict=True)) == [
        (0, 2), (1, 2), (2, 2), (3, 1)
    ]  # fmt: skip


@pytest.mark.parametrize("step", [0, 1, 2])
def test_a_link_with_a_groups_step_opens_that_step_alone(stepped: SteppedStore, step: int) -> None:
    at = open_page("groups/page.py", run=str(stepped.served), question="q1", at=str(step))
    assert f"Question q1, training step {step}" in [h.value for h in at.subheader]
    members = at.dataframe[0].value
    # Before: the question's six samples of every step, pooled into one "group".
    assert list(members["reward"]) == _SERVED[step]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["samples"] == str(len(_SERVED[step]))
    assert ("Zero reward variance" in texts(at)) is (len(set(_SERVED[step])) == 1)


def test_the_samples_without_a_step_open_as_a_group_of_their_own(stepped: SteppedStore) -> None:
    episodes = _episodes(stepped.url, stepped.mixed)
    question_id = episodes[0].question_id
    at = open_page("groups/page.py", run=str(stepped.mixed), question=question_id, at="none")
    assert f"Question {question_id}, without a training step" in [h.value for h in at.subheader]
    assert list(at.dataframe[0].value["reward"]) == [1.0, 0.0, 0.0]
    # The overview lists it beside step 3's numbered group.
    table = open_page("groups/page.py", run=str(stepped.mixed)).dataframe[0].value
    assert sorted(table["samples"]) == [2, 3]


def test_a_bad_step_in_the_link_is_noted(stepped: SteppedStore) -> None:
    at = open_page("groups/page.py", run=str(stepped.served), question="q1", at="x")
    warned = at.warning[0].value.replace("\\", "")
    assert "at='x' in the link is not a training step (or none); ignored." in warned
    assert len(at.dataframe[0].value) == 4  # the question's groups to pick from
    at = open_page("groups/page.py", run=str(stepped.served), at="1")
    warned = at.warning[0].value.replace("\\", "")
    assert "at=1 in the link comes without its question (question=...)" in warned


def test_replay_links_an_episodes_group_at_its_step(stepped: SteppedStore) -> None:
    def link_of(episode: EpisodeSummary) -> str | None:
        at = open_page("replay/page.py", episode=str(episode.id))
        links = [p.proto for p in at.get("page_link") if p.proto.label == "Its GRPO group"]
        return links[0].query_string if links else None

    served = {e.train_step: e for e in _episodes(stepped.url, stepped.served)}
    assert link_of(served[1]) == f"run={stepped.served}&question=q1&at=1"
    # Step 3's one sample is no group: before, the question's samples of every step counted.
    assert link_of(served[3]) is None
    mixed = _episodes(stepped.url, stepped.mixed)
    stepless = next(e for e in mixed if e.train_step is None)
    question = stepless.question_id
    assert link_of(stepless) == f"run={stepped.mixed}&question={question}&at=none"
    numbered = next(e for e in mixed if e.train_step == 3)
    detail = Store(stepped.url, read_only=True).get_episode(numbered.id)
    assert detail is not None and detail.group_index is not None
    group = detail.group_index
    assert link_of(numbered) == f"run={stepped.mixed}&question={question}&group={group}"


def test_a_map_cell_opens_the_questions_groups_of_its_run_or_step(stepped: SteppedStore) -> None:
    # A whole run's cell: the question's groups to pick from (before, on a served run, its
    # samples of every step pooled into one "group").
    qmap = map_reads.map_view((stepped.served, stepped.tools), False).qmap
    page, query, _ = cell_target(qmap, qmap.row("q1") * len(qmap.run_ids))
    assert (page, query) == (nav.GROUPS, [(nav.P_RUN, str(stepped.served)), (nav.P_QUESTION, "q1")])
    table = open_page(page, **dict(query)).dataframe[0].value
    assert sorted(table["training step"]) == [0, 1, 2, 3]
    # A training step's cell: the question's groups at that step.
    steps = (RunStep(stepped.tools, 1), RunStep(stepped.tools, 2))
    qmap = map_reads.map_view(steps, False).qmap
    page, query, _ = cell_target(qmap, qmap.row("q1") * len(qmap.run_ids) + 1)
    at = open_page(page, **dict(query))
    table = at.dataframe[0].value
    assert list(zip(table["training step"], table["samples"], strict=True)) == [(2, 2)]
