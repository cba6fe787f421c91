"""Revision 0020: an imported or Recorder step whose text carried no action has `action` and
`argument` NULL. A store at 0019 (where they read QUERY and the text) upgrades with those steps
NULL, and a step rollscope played without an action line (its environment ran the text as a
QUERY) as it was. An imported episode that the repeats of its text made a loop is classed
again, and its run's counts with it."""

from __future__ import annotations

from dataclasses import replace

from rollout_core.records import IterationBatch
from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.support.plain_sql import sql_rows, sql_run
from tests.support.records import finish, play, spec, start, step
from tests.support.store_files import downgrade_to

_RAW = "  I would look at the singer table first.\n"


def _actions(url: str) -> list[tuple[str, int, str | None, str | None, int]]:
    """Each step's run, number, action, argument and parsed flag, read with SQL."""
    return sql_rows(
        url,
        "SELECT r.name, s.step_no, s.action, s.argument, s.parsed FROM steps s "
        "JOIN episodes e ON e.id = s.episode_id JOIN runs r ON r.id = e.run_id "
        "ORDER BY r.id, s.step_no",
    )


def _actionless_first_step(batch: IterationBatch) -> IterationBatch:
    """The batch with its first step as an importer records a turn without an action."""
    first = replace(batch.steps[0], action=None, argument=None, raw_output=_RAW)
    return IterationBatch(batch.started, [first, *batch.steps[1:]], batch.finished)


def test_steps_without_an_action_played_elsewhere_are_null_and_survive_a_round_trip(
    store_url: str,
) -> None:
    store = Store(store_url)
    played = play("q1", 0, "wrong", 0.0, 2, unparsed=1, raw=_RAW)
    elsewhere = _actionless_first_step(play("q2", 0, "wrong", 0.0, 2, unparsed=1))
    for name, kind, source_format, batch in (
        ("played", "batch", None, played),
        ("imported", "import", "verl", elsewhere),
        ("recorded", "training", "recorder", elsewhere),
    ):
        run_id = store.create_run(
            spec(name, kind=kind), episodes_planned=1, source_format=source_format
        )
        store.sink(run_id).write(batch)
    store.close()
    at_head = _actions(store_url)
    assert [row[2:] for row in at_head if row[1] == 1] == [
        ("QUERY", "arg 1", 0),  # rollscope's environment ran it as a QUERY
        (None, None, 0),
        (None, None, 0),
    ]

    downgrade_to(store_url, "0019")  # the columns were NOT NULL: the text stood in as a QUERY
    text = _RAW.strip()
    assert [row[2:] for row in _actions(store_url) if row[1] == 1] == [
        ("QUERY", "arg 1", 0),
        ("QUERY", text, 0),
        ("QUERY", text, 0),
    ]

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None
        assert store.schema_upgrade.after == HEAD_REVISION
        (episode,) = store.get_episodes([2])
        assert [(s.action, s.argument) for s in episode.steps] == [
            (None, None),
            ("ANSWER", "arg 2"),
        ]
        # The view over the rebuilt steps table still gives each step's prompt.
        assert store.get_episodes([1])[0].steps[1].prompt
    finally:
        store.close()
    assert _actions(store_url) == at_head


def _looped_by_prose() -> IterationBatch:
    """An imported episode without an answer: the same prose twice, then DESCRIBE a three
    times and a QUERY. Read as QUERYs, the prose repeated once more: half its six steps."""
    prose = {"action": None, "argument": None, "parsed": False, "raw": _RAW}
    steps = [step("q3", 0, 1, **prose), step("q3", 0, 2, **prose)]
    steps += [step("q3", 0, n, action="DESCRIBE", argument="a") for n in (3, 4, 5)]
    steps.append(step("q3", 0, 6, argument="SELECT 1", done=True))
    end = finish("q3", 0, "budget_exhausted", 0.0, 6, failure_class="budget_exhausted")
    return IterationBatch([start("q3", 0)], steps, [end])


def test_an_imported_loop_of_repeated_prose_is_classed_again(store_url: str) -> None:
    store = Store(store_url)
    run_id = store.create_run(
        spec("looped", kind="import"), episodes_planned=1, source_format="verl"
    )
    store.sink(run_id).write(_looped_by_prose())
    store.close()
    downgrade_to(store_url, "0019")
    # As an import before 0020 classed it, the prose counted as a repeated QUERY.
    sql_run(store_url, "UPDATE episodes SET failure_class = 'action_loop'")
    sql_run(store_url, "UPDATE run_counts SET key = 'action_loop' WHERE kind = 'class'")

    Store(store_url).close()  # a writer upgrades on open
    assert sql_rows(store_url, "SELECT failure_class FROM episodes") == [("budget_exhausted",)]
    assert sql_rows(store_url, "SELECT key, n FROM run_counts WHERE kind = 'class'") == [
        ("budget_exhausted", 1)
    ]
