"""Checks that a store gives back every step's prompt exactly as the model saw it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeKey, StepRecord
from storage.models import Episode
from storage.read_models import EpisodeFilter
from storage.store import Store


def as_stored(text: str) -> str:
    """What the store keeps of a text: NUL (which PostgreSQL cannot hold) as U+FFFD."""
    return text.replace("\x00", "\ufffd")


def check_prompts(store: Store, runs: Mapping[int, Iterable[StepRecord]]) -> int:
    """Every record's prompt (run id -> the records written to it) comes back exactly, by
    export and by replay; returns how many."""
    count = 0
    for run_id, records in runs.items():
        details = list(store.iter_episode_details(run_id, flt=EpisodeFilter(finished_only=False)))
        stored = {
            (EpisodeKey(d.summary.question_id, d.summary.sample_index), s.step_no): s.prompt
            for d in details
            for s in d.steps
        }
        for r in records:
            want = [dict(m) for m in r.prompt]
            assert list(stored[r.key, r.step_no]) == want, (run_id, r.key, r.step_no)
            count += 1
        for d in details[:: max(1, len(details) // 20)]:  # replay reads the same, one at a time
            one = store.get_episode(d.summary.id)
            assert one is not None and [s.prompt for s in one.steps] == [s.prompt for s in d.steps]
    return count


def check_view(store: Store) -> int:
    """Every step's prompt in the `step_prompts` SQL view is the one the Store rebuilds;
    returns how many steps."""
    with Session(store._engine) as session:
        rows = session.execute(text("SELECT episode_id, step_no, prompt FROM step_prompts")).all()
        run_ids = list(session.scalars(select(Episode.run_id).distinct()))
    in_sql = {(e, n): json.loads(p) for e, n, p in rows}
    checked = 0
    for run_id in run_ids:
        for d in store.iter_episode_details(run_id, flt=EpisodeFilter(finished_only=False)):
            for s in d.steps:
                assert in_sql[d.summary.id, s.step_no] == list(s.prompt), (d.summary.id, s.step_no)
                checked += 1
    assert checked == len(in_sql), "some steps were not read back"
    return checked
