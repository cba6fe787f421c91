"""Failure classes in the store: kept as written, classified from the stored steps when a
record comes without one, back-filled by the migration, filtered and counted per run."""

from __future__ import annotations

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

from rollout_core.records import (
    ActionKind,
    EpisodeRecord,
    FailureClass,
    IterationBatch,
    Outcome,
    StepRecord,
)
from storage.migrations import alembic_config, sqlite_foreign_keys_off
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.records import spec, start
from tests.support.stores import write_run

ERR = "no such column: nme"
# (action, argument, parsed, error) of each step, by the class the episode should get
_EPISODES: dict[str, tuple[Outcome, float, list[tuple[ActionKind, str, bool, str | None]]]] = {
    "correct": ("correct", 0.1, [("QUERY", "SELECT 1", True, None), ("ANSWER", "1", True, None)]),
    "wrong_after_gold": (
        "wrong", 0.1, [("QUERY", "SELECT 1", True, None), ("ANSWER", "2", True, None)]
    ),
    "wrong_answer": (
        "wrong", 0.05, [("QUERY", "SELECT 1", True, None), ("ANSWER", "2", True, None)]
    ),
    "unparsed": ("budget_exhausted", 0.0, [("QUERY", "hmm", False, ERR)] * 2 + [
        ("DESCRIBE", "singer", True, None)]),
    "action_loop": ("budget_exhausted", 0.0, [("DESCRIBE", "singer", True, None)] * 3),
    "sql_errors": ("budget_exhausted", 0.0, [
        ("QUERY", "SELECT nme", True, ERR), ("QUERY", "SELECT nam", True, ERR),
        ("DESCRIBE", "singer", True, None)]),
    "budget_exhausted": ("budget_exhausted", 0.1, [
        ("DESCRIBE", "singer", True, None), ("QUERY", "SELECT 1", True, None),
        ("SAMPLE", "singer", True, None)]),
    "env_error": ("error", 0.0, [("ANSWER", "1", True, "grading failed: boom")]),
}  # fmt: skip


def _batch(qid: str, sample: int, failure_class: FailureClass | None) -> IterationBatch:
    outcome, progress, facts = _EPISODES[qid]
    steps = [
        StepRecord(
            question_id=qid,
            sample_index=sample,
            step_no=i,
            prompt=(),
            raw_output=f"{action} {arg}" if parsed else arg,
            action=action,
            argument=arg,
            parsed=parsed,
            observation="",
            error=error,
            reward=0.0,
            done=i == len(facts),
        )
        for i, (action, arg, parsed, error) in enumerate(facts, start=1)
    ]
    record = EpisodeRecord(
        question_id=qid,
        sample_index=sample,
        outcome=outcome,
        reward=1.0 if outcome == "correct" else 0.0,
        progress=progress,
        operational=0.0,
        steps=len(steps),
        answer=None,
        duration_seconds=0.1,
        failure_class=failure_class,
    )
    return IterationBatch(started=[start(qid, sample)], steps=steps, finished=[record])


def _classes(store: Store, run_id: int) -> dict[tuple[str, int], str | None]:
    items = store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=100).items
    return {(e.question_id, e.sample_index): e.failure_class for e in items}


def _fill(store: Store) -> int:
    batches = []
    for qid in _EPISODES:
        batches.append(_batch(qid, 0, None))  # classified by the store from the steps
        batches.append(_batch(qid, 1, "env_error"))  # kept as the producer classified it
    return write_run(store, spec("classes"), batches, status=None)


def test_a_record_without_a_class_is_classified_from_its_stored_steps(store: Store) -> None:
    run_id = _fill(store)
    classes = _classes(store, run_id)
    assert {q: classes[(q, 0)] for q in _EPISODES} == {q: q for q in _EPISODES}
    assert {classes[(q, 1)] for q in _EPISODES} == {"env_error"}


def test_steps_written_in_earlier_batches_count_too(store: Store) -> None:
    run_id = store.create_run(spec("split"), episodes_planned=1)
    whole = _batch("action_loop", 0, None)
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=whole.started, steps=whole.steps[:2]))
    sink.write(IterationBatch(steps=whole.steps[2:], finished=whole.finished))
    assert _classes(store, run_id) == {("action_loop", 0): "action_loop"}


def test_episodes_filter_by_class_and_runs_count_their_mix(store: Store) -> None:
    run_id = _fill(store)
    page = store.list_episodes(
        EpisodeFilter(run_ids=(run_id,), failure_classes=("sql_errors", "unparsed"))
    )
    assert sorted((e.question_id, e.sample_index) for e in page.items) == [
        ("sql_errors", 0),
        ("unparsed", 0),
    ]
    (dist,) = store.run_distributions([run_id])
    assert dist.failure_counts["env_error"] == len(_EPISODES) + 1
    assert sum(dist.failure_counts.values()) == 2 * len(_EPISODES)
    assert all(dist.failure_counts[c] == 1 for c in _EPISODES if c != "env_error")


def test_the_migration_back_fills_every_finished_episode(store_url: str) -> None:
    store = Store(store_url)
    run_id = _fill(store)
    before = _classes(store, run_id)
    unfinished = store.create_run(spec("playing"), episodes_planned=1)
    store.sink(unfinished).write(IterationBatch(started=[start("q-live", 0)]))
    store.close()

    cfg = alembic_config()
    previous = ScriptDirectory.from_config(cfg).get_revision("0005").down_revision
    engine = Store(store_url)._engine
    with engine.connect() as conn, sqlite_foreign_keys_off(conn), conn.begin():
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, str(previous))
        assert "failure_class" not in str(
            conn.execute(text("SELECT * FROM episodes LIMIT 1")).keys()
        )
    store = Store(store_url)  # a writer upgrades on open, back-filling the classes
    try:
        assert store.schema_upgrade is not None and store.schema_upgrade.before == previous
        assert _classes(store, run_id) == {
            **before,
            # the migration classifies from the steps, as the store does: producers' own
            # classes are not kept by a downgrade
            **{(q, 1): q for q in _EPISODES},
        }
        live = store.list_episodes(EpisodeFilter(run_ids=(unfinished,), finished_only=False))
        assert [e.failure_class for e in live.items] == [None]
    finally:
        store.close()


def test_an_abandoned_episode_of_an_env_run_is_stored_and_counted(store: Store) -> None:
    run_id = store.create_run(spec("served", kind="env"), episodes_planned=1)
    left = EpisodeRecord("q1", 0, "abandoned", -0.01, 0.0, 0.0, 1, None, 2.0)  # no class given
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=[start("q1")]))
    sink.write(IterationBatch(finished=[left]))
    run = store.get_run(run_id)
    assert run is not None and run.kind == "env" and run.episodes_finished == 1
    [episode] = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    assert (episode.outcome, episode.failure_class) == ("abandoned", "abandoned")
    [mix] = store.run_distributions([run_id])
    assert mix.failure_counts["abandoned"] == 1
