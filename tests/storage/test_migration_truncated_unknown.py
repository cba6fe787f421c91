"""Revision 0025: `steps.truncated` is NULL where nobody could tell whether the output was cut
at the length limit, so `AVG(truncated)` over an import of files that never say reads NULL,
not "no output cut". A store at 0024 (where every such step read 0) upgrades with the steps
of producers that did not say NULL, what a producer did say kept, and a fork's replayed step
given its source step's value back."""

from __future__ import annotations

from dataclasses import replace

from rollout_core.records import IterationBatch, PolicyInfo
from storage.store import Store
from tests.support.plain_sql import sql_rows, sql_run
from tests.support.records import play, spec, start
from tests.support.store_files import downgrade_to

Cuts = tuple[bool | None, ...]


def _cut(batch: IterationBatch, *flags: bool | None) -> IterationBatch:
    """The batch with its steps' `truncated` flags, in step order."""
    steps = [replace(s, truncated=f) for s, f in zip(batch.steps, flags, strict=True)]
    return IterationBatch(batch.started, steps, batch.finished)


def _flags(url: str) -> dict[str, Cuts]:
    """Per run, its one episode's steps' `truncated`, read with SQL (PostgreSQL's booleans and
    SQLite's 0/1 alike)."""
    found = sql_rows(
        url,
        "SELECT r.name, s.truncated FROM steps s JOIN episodes e ON e.id = s.episode_id "
        "JOIN runs r ON r.id = e.run_id ORDER BY r.name, s.step_no",
    )
    out: dict[str, Cuts] = {}
    for name, flag in found:
        out[name] = (*out.get(name, ()), None if flag is None else bool(flag))
    return out


def test_steps_nobody_could_tell_about_are_null_and_upgrade_from_zero(store_url: str) -> None:
    store = Store(store_url)
    # (run, kind, source format, policy reported, the steps' flags as each producer writes them)
    producers: list[tuple[str, str, str | None, str | None, Cuts]] = [
        ("played", "batch", None, "hf", (True, False)),
        ("trained", "training", None, "hf", (False, True)),
        ("trl", "import", "trl", None, (None, None)),
        ("verl", "import", "verl", None, (None, None)),
        ("chat", "import", "messages", None, (None, None)),
        ("skyrl", "import", "skyrl", None, (None, True)),
        ("rllm", "import", "rllm", None, (None, False)),
        ("recorded", "training", "recorder", None, (None, None)),
        ("recorded-cut", "training", "recorder", None, (None, True)),
        ("served", "env", None, "env-server", (None, None)),
        ("tools", "training", None, "tools", (None, None)),
    ]
    episode_ids = {}
    for name, kind, source, policy, flags in producers:
        run_id = store.create_run(
            spec(name, kind=kind),
            episodes_planned=0,
            source_format=source,
            policy_info=None if policy is None else PolicyInfo(name=policy),
        )
        store.sink(run_id).write(_cut(play(name, 0, "correct", 1.0, 2), *flags))
        episode_ids[name] = sql_rows(store_url, f"SELECT id FROM episodes WHERE run_id = {run_id}")[
            0
        ][0]
    # A fork of "played" at step 2: its step 1 replays the source's, cut as that one was.
    fork_id = store.create_run(spec("forked", kind="fork"), episodes_planned=0)
    fork = play("played", 1, "correct", 1.0, 2)
    begun = start("played", 1, forked_from=episode_ids["played"], fork_step=2)
    fork = IterationBatch([begun], [replace(fork.steps[0], replayed=True), fork.steps[1]], [])
    store.sink(fork_id).write(_cut(fork, True, False))
    store.close()
    at_head = _flags(store_url)
    assert at_head == {name: flags for name, _, _, _, flags in producers} | {
        "forked": (True, False)
    }

    downgrade_to(store_url, "0024")  # 0 stood in for what nobody said
    before = _flags(store_url)
    assert before["trl"] == (False, False) and before["skyrl"] == (False, True)
    # Before 0025 a fork's replay dropped its source step's flag.
    sql_run(store_url, "UPDATE steps SET truncated = false WHERE replayed")

    Store(store_url).close()  # a writer upgrades on open
    assert _flags(store_url) == at_head
    told = sql_rows(
        store_url,
        "SELECT count(s.truncated), count(*) FROM steps s JOIN episodes e ON e.id = s.episode_id "
        "JOIN runs r ON r.id = e.run_id WHERE r.name = 'verl'",
    )
    assert told == [(0, 2)]  # an average over them is NULL, not 0% cut
