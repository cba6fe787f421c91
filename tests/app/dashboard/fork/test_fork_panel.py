"""Replay's "continue from this step with…" through AppTest, played by a real worker process,
and Compare of the original with its fork."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import batch
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.specs import RunRequest
from storage.read_models import EpisodeDetail, EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.benchmark import make_benchmark

WORKER_DEADLINE_S = 180.0  # a worker process imports the engine first: slow on a loaded machine


def _submit(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label.startswith(label)).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


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
    at = open_page("replay/page.py", episode=str(source.summary.id), step="2")
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
        "compare/page.py",
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
    at = open_page("replay/page.py", episode=str(played.id))
    assert f"continues episode {source.summary.id} from step 2" in texts(at)


def test_a_fork_with_a_checkpoint_outside_the_roots_is_refused_under_its_field(
    recorded: Recorded,
) -> None:
    at = open_page("replay/page.py", episode=str(recorded.source.summary.id), step="2")
    at.selectbox(key="rp_fork_policy").set_value("other checkpoint directory...")
    at.text_input(key="rp_fork_checkpoint").set_value("/etc")
    at.number_input(key="rp_fork_temperature").set_value(3.0)
    _submit(at, "Continue from step 2")
    shown = texts(at)
    assert "outside the checkpoint roots" in shown
    assert "temperature must be between 0 and 2, got 3" in shown
    assert [r.id for r in Store(recorded.url).list_runs()] == [recorded.run_id]


def test_a_fork_whose_dataset_is_gone_says_so_under_the_form(recorded: Recorded) -> None:
    # Found on a copied store: the run's questions file was gone, and the form's callback
    # raised instead of saying so.
    spec = Store(recorded.url).get_run(recorded.run_id)
    assert spec is not None
    Path(str(spec.spec["questions_path"])).unlink()
    at = open_page("replay/page.py", episode=str(recorded.source.summary.id), step="2")
    at.selectbox(key="rp_fork_policy").set_value("oracle")
    _submit(at, "Continue from step 2")
    assert "which is not there any more: put it back there to resume or fork the run" in texts(
        at
    ).replace("\\", "")
    assert [r.id for r in Store(recorded.url).list_runs()] == [recorded.run_id]
