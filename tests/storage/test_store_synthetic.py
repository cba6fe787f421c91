"""The synthetic filler writes consistent rows that every read understands."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rollout_core.prompts import format_question
from rollout_core.records import EpisodeKey
from storage.models import Episode, Step
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.storage.prompt_checks import check_view
from tests.support.records import play, spec
from tests.support.synthetic import fill_synthetic
from tests.support.synthetic_text import DB_TABLES, system_prompt


def test_fill_synthetic_small(store: Store) -> None:
    ids = fill_synthetic(
        store, runs=2, episodes_per_run=120, steps_per_episode=5, chunk_episodes=50
    )
    assert len(ids) == 2
    runs = {r.id: r for r in store.list_runs()}
    for run_id in ids:
        run = runs[run_id]
        assert (run.status, run.episodes_finished, run.episodes_planned) == ("completed", 120, 120)
        assert run.started_at is not None and run.ended_at is not None
    with Session(store._engine) as s:
        # The denormalized counters agree with the steps table.
        n_steps = s.scalar(select(func.count()).select_from(Step))
        assert n_steps == s.scalar(select(func.sum(Episode.steps)))
        unparsed = s.scalar(select(func.count()).select_from(Step).where(Step.parsed.is_(False)))
        assert unparsed == s.scalar(select(func.sum(Episode.unparsed_steps)))
        erring = select(Step.episode_id).where(Step.action == "QUERY", Step.error.is_not(None))
        n_erring = s.scalar(select(func.count(func.distinct(erring.subquery().c.episode_id))))
        assert n_erring == s.scalar(
            select(func.count()).select_from(Episode).where(Episode.has_sql_error.is_(True))
        )
        for action in ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER"):
            counted = s.scalar(
                select(func.count())
                .select_from(Step)
                .where(Step.action == action, Step.parsed.is_(True))
            )
            column = getattr(Episode, f"{action.lower()}_steps")
            assert counted == s.scalar(select(func.sum(column))), action
    page = store.list_episodes(EpisodeFilter(run_ids=(ids[0],)), sort="reward", limit=500)
    assert len(page.items) == 120
    detail = store.get_episode(page.items[0].id)
    assert detail is not None and len(detail.steps) == detail.summary.steps
    assert [s.step_no for s in detail.steps] == list(range(1, detail.summary.steps + 1))
    assert len(store.compare_runs(ids, limit=1000).items) == 120
    # The runner's normal path still works after explicit-id inserts (PostgreSQL sequence).
    run_id = store.create_run(spec("after"), episodes_planned=1)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    assert store.finished_keys(run_id) == {EpisodeKey("q1", 0)}


def test_synthetic_prompts_are_the_runners_and_come_back_exactly(store: Store) -> None:
    """A filled store holds the runner's own prompts (JSON chat messages), as the sink would."""
    ids = fill_synthetic(
        store, runs=1, episodes_per_run=40, steps_per_episode=4, system_prompt_chars=2_000
    )
    checked = 0
    for d in store.iter_episode_details(ids[0]):
        db = d.summary.db_id
        system = system_prompt(2_000, 7)
        assert len(system) > 1_900
        messages = [
            {"role": "system", "content": system},
            {
                "role": "user",
                "content": format_question(d.summary.question, list(DB_TABLES[db]), None, db),
            },
        ]
        for s in d.steps:
            assert list(s.prompt) == messages
            messages += [
                {"role": "assistant", "content": s.raw_output},
                {"role": "user", "content": s.observation},
            ]
            checked += 1
    assert checked > 100
    assert check_view(store) == checked
