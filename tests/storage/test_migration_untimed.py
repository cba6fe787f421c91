"""Revision 0016: an episode's duration and rollscope's environment signals (progress,
operational) are NULL where nobody measured them, and a run rollscope did not play stores no
settings of playing. A store at 0015 (where they read 0.0) upgrades with those of imported,
recorded and abandoned env-server episodes NULL, and every measured value as it was."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from rollout_core.records import IterationBatch, RunSpec
from rollout_core.settings import EnvironmentSettings
from storage.store import Store
from tests.support.plain_sql import sql_rows, sql_run
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

Measures = tuple[float | None, float | None, float | None]


def _measures(url: str) -> dict[str, set[Measures]]:
    """Per run, the (duration_seconds, progress, operational) its episodes hold, read with SQL."""
    rows = sql_rows(
        url,
        "SELECT r.name, e.duration_seconds, e.progress, e.operational "
        "FROM episodes e JOIN runs r ON r.id = e.run_id",
    )
    out: dict[str, set[Measures]] = {}
    for name, *measures in rows:
        out.setdefault(name, set()).add(tuple(measures))  # type: ignore[arg-type]
    return out


def _finished_as(batch: IterationBatch, **fields: Any) -> IterationBatch:
    return IterationBatch(
        batch.started, batch.steps, [replace(e, **fields) for e in batch.finished]
    )


def _untimed(batch: IterationBatch) -> IterationBatch:
    return _finished_as(batch, duration_seconds=None)


def _unplayed(batch: IterationBatch) -> IterationBatch:
    return _finished_as(batch, duration_seconds=None, progress=None, operational=None)


def test_unmeasured_episodes_are_null_and_survive_a_round_trip(store_url: str) -> None:
    store = Store(store_url)
    for name, kind, source, dataset, batches in (
        ("played", "batch", None, "demo", [play("q1", 0, "correct", 1.0, 2)]),
        ("imported", "import", "verl", "", [_unplayed(play("q2", 0, "wrong", 0, 2))]),
        # --questions: rollscope played its SQL again, so its signals were measured.
        ("checked", "import", "verl", "demo", [_untimed(play("q3", 0, "wrong", 0, 2))]),
        ("recorded", "training", "recorder", "", [_unplayed(play("q4", 0, "correct", 1, 1))]),
        ("served", "env", None, "demo", [
            play("q5", 0, "correct", 1.0, 2),
            _untimed(play("q6", 0, "abandoned", 0.0, 1)),  # left open by a killed server
            play("q7", 0, "abandoned", 0.0, 1, duration=3.0),  # its client left: timed
        ]),
    ):  # fmt: skip
        run_id = store.create_run(
            spec(name, kind=kind, dataset=dataset), episodes_planned=0, source_format=source
        )
        for batch in batches:
            store.sink(run_id).write(batch)
    store.close()
    at_head = _measures(store_url)
    assert at_head == {
        "played": {(1.0, 0.25, 1.0)},
        "imported": {(None, None, None)},
        "checked": {(None, 0.25, 1.0)},
        "recorded": {(None, None, None)},
        "served": {(1.0, 0.25, 1.0), (None, 0.25, 1.0), (3.0, 0.25, 1.0)},
    }

    downgrade_to(store_url, "0015")  # zeros stood in for what nobody measured
    assert _measures(store_url) == {
        "played": {(1.0, 0.25, 1.0)},
        "imported": {(0.0, 0.0, 0.0)},
        "checked": {(0.0, 0.25, 1.0)},
        "recorded": {(0.0, 0.0, 0.0)},
        "served": {(1.0, 0.25, 1.0), (0.0, 0.25, 1.0), (3.0, 0.25, 1.0)},
    }

    # Before 0016 a run rollscope did not play stored its defaults as its settings too.
    sql_run(
        store_url,
        "UPDATE runs SET spec = (SELECT spec FROM runs WHERE name = 'played') "
        "WHERE source_format IS NOT NULL",
    )

    Store(store_url).close()  # a writer upgrades on open
    assert _measures(store_url) == at_head
    settings = {"generation", "environment", "samples", "limit", "question_ids"}
    kept = {name: settings & set(spec) for name, spec in _specs(store_url).items()}
    assert kept == {
        "played": settings, "served": {"environment"},  # its clients generate (0030)
        "imported": set(), "checked": set(), "recorded": set(),
    }  # fmt: skip


def test_a_new_run_rollscope_does_not_play_stores_no_settings_of_playing(store_url: str) -> None:
    store = Store(store_url)
    store.create_run(spec("imported", kind="import"), episodes_planned=0, source_format="verl")
    store.create_run(spec("played"), episodes_planned=0)
    imported, played = store.find_run("imported"), store.find_run("played")
    store.close()
    assert imported is not None and played is not None
    assert "generation" not in imported.spec and "environment" not in imported.spec
    assert played.spec["generation"]["temperature"] == 0.0
    # Read back, the spec is whole: what the code needs takes rollscope's defaults.
    assert RunSpec.from_stored(imported.spec).environment == EnvironmentSettings()


def _specs(url: str) -> dict[str, dict[str, Any]]:
    found = sql_rows(url, "SELECT name, spec FROM runs")
    return {name: spec if isinstance(spec, dict) else json.loads(spec) for name, spec in found}
