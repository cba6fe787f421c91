"""The episode's step counters say what `docs/store.md` says they count, to plain SQL: each
action's parsed steps, the unparsed ones apart, adding up to `steps`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.registry import make_policy
from storage.store import Store
from tests.support.records import spec
from tests.support.stores import play_run

ACTIONS = ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER")


def test_the_step_counters_count_each_actions_parsed_steps_and_add_up(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(str(path))
    demo = load_named_dataset("demo")
    for name in ("random", "oracle"):  # random writes unparsed steps, which run as a QUERY
        play_run(store, spec(name, policy=name), demo, make_policy(name))
    store.close()
    db = sqlite3.connect(path)
    counted = {a: f"(SELECT count(*) FROM steps s WHERE s.episode_id = e.id AND s.parsed "
                  f"AND s.action = '{a}')" for a in ACTIONS}  # fmt: skip
    unparsed = "(SELECT count(*) FROM steps s WHERE s.episode_id = e.id AND NOT s.parsed)"
    every = "(SELECT count(*) FROM steps s WHERE s.episode_id = e.id)"
    checks = [
        *(f"e.{a.lower()}_steps = {sql}" for a, sql in counted.items()),
        f"e.unparsed_steps = {unparsed}",
        f"e.steps = {every}",
        "e.steps = e.unparsed_steps + e.describe_steps + e.sample_steps + e.query_steps "
        "+ e.answer_steps",
    ]
    for check in checks:
        wrong = db.execute(f"SELECT count(*) FROM episodes e WHERE NOT ({check})").fetchone()
        assert wrong == (0,), check
    totals = db.execute(
        "SELECT sum(unparsed_steps), sum(query_steps), "
        "(SELECT count(*) FROM steps WHERE action = 'QUERY') FROM episodes"
    ).fetchone()
    assert totals[0] > 0 and totals[1] > 0, "both kinds of step were played"
    assert totals[2] == totals[0] + totals[1], "an unparsed step's action reads QUERY"
