"""Revision 0011 on a store the previous release wrote: every step reads the same, its
argument and error are whole texts in their columns, and its prompt is the same messages."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.read_models import EpisodeFilter
from storage.store import Store

DATA = Path(__file__).parent / "data"


def _as_messages(prompt: str) -> list[dict[str, Any]]:
    """What 0011 makes of a stored prompt: its chat messages, or one `prompt` message."""
    try:
        value = json.loads(prompt)
    except ValueError:
        return [{"role": "prompt", "content": prompt}]
    return value if isinstance(value, list) else [{"role": "prompt", "content": prompt}]


@pytest.fixture()
def upgraded(tmp_path: Path) -> Store:
    path = tmp_path / "old.db"
    shutil.copy(DATA / "store_0010.db", path)
    store = Store(str(path))
    yield store  # type: ignore[misc]
    store.close()


def test_a_previous_release_store_reads_the_same_after_the_upgrade(upgraded: Store) -> None:
    assert upgraded.schema_upgrade is not None and upgraded.schema_upgrade.before == "0010"
    with gzip.open(DATA / "store_0010_reads.json.gz", "rt", encoding="utf-8") as f:
        before: dict[str, list[dict[str, Any]]] = json.load(f)
    after = {
        str(d.summary.id): d.steps
        for run in upgraded.list_runs()
        for d in upgraded.iter_episode_details(run.id, flt=EpisodeFilter(finished_only=False))
    }
    assert after.keys() == before.keys()
    assert len(before) == 284
    checked = 0
    for episode_id, old_steps in before.items():
        new_steps = after[episode_id]
        assert [s.step_no for s in new_steps] == [s["step_no"] for s in old_steps]
        for old, new in zip(old_steps, new_steps, strict=True):
            for field in ("raw_output", "action", "argument", "observation", "error", "reward"):
                assert getattr(new, field) == old[field], (episode_id, old["step_no"], field)
            assert list(new.prompt) == _as_messages(old["prompt"]), (episode_id, old["step_no"])
            checked += 1
    assert checked == 879


def test_plain_sql_reads_every_argument_and_error_after_the_upgrade(upgraded: Store) -> None:
    path = upgraded.url
    with closing(sqlite3.connect(path)) as db:
        parsed, empty_argument = db.execute(
            "SELECT count(*), sum(argument = '') FROM steps WHERE parsed"
        ).fetchone()
        failed, empty_error = db.execute(
            "SELECT count(*), sum(error = '') FROM steps WHERE error IS NOT NULL"
        ).fetchone()
        columns = {r[1] for r in db.execute("PRAGMA table_info(steps)")}
        view_steps = db.execute("SELECT count(*) FROM step_prompts").fetchone()[0]
        steps = db.execute("SELECT count(*) FROM steps").fetchone()[0]
    assert parsed == 858 and empty_argument == 0
    assert failed == 52 and empty_error == 0
    assert not {"argument_start", "error_start", "prompt_layout", "prompt_sha256"} & columns
    assert view_steps == steps


def test_the_view_gives_the_prompts_the_store_reads(upgraded: Store) -> None:
    from tests.storage.prompt_checks import check_view

    assert check_view(upgraded) == 879
