"""Schema migrations: the revisions build exactly the models' schema, and old stores upgrade."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from rollout_core.records import RunSpec
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.migrations import HEAD_REVISION, alembic_config, head_revision
from storage.models import Base
from storage.store import Store
from storage.text_search import in_models


def test_migrations_build_the_models_schema(store: Store) -> None:
    """Every column, index and constraint of storage.models comes from a revision (the text
    search's index aside: `storage.text_search`)."""
    opts = {"include_name": in_models}
    with store._engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts=opts), Base.metadata)
    assert diffs == []


def test_the_head_a_store_opens_at_without_alembic_is_the_scripts_head(store: Store) -> None:
    # A new revision must move HEAD_REVISION too: a store it left behind would open as current.
    assert head_revision() == HEAD_REVISION
    with store._engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == HEAD_REVISION


def test_a_new_sqlite_store_has_the_schema_the_revisions_build(tmp_path: Path) -> None:
    # A new SQLite store gets the revisions' schema replayed in one transaction; the same
    # revisions run one by one on another empty file must give the same database.
    Store(f"sqlite:///{tmp_path / 'new.db'}").close()
    engine = create_engine(f"sqlite:///{tmp_path / 'migrated.db'}")
    with engine.connect() as conn, conn.begin():
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    engine.dispose()

    def schema(name: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        # A table's constraints come in no fixed order from a rebuild, so its lines are
        # compared sorted; SQLite's own statistics tables are not schema.
        with closing(sqlite3.connect(tmp_path / name)) as conn:
            master = [
                (kind, name, table, sorted(line.strip(" \t,") for line in (sql or "").splitlines()))
                for kind, name, table, sql in conn.execute(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master "
                    "WHERE name NOT LIKE 'sqlite_stat%' ORDER BY type, name"
                )
            ]
            return master, conn.execute("SELECT version_num FROM alembic_version").fetchall()

    replayed, migrated = schema("new.db"), schema("migrated.db")
    assert replayed == migrated
    assert replayed[1] == [(HEAD_REVISION,)]
    assert any(row[1] == "episode_text" for row in replayed[0])  # the search index came too


# A hf run as stores before typed settings kept it: what the policy reported about itself
# (`policy`, `checkpoint`, the dtype chosen) merged into the generation settings, and batch
# size and seed beside them.
_LEGACY_HF = {
    "name": "ckpt-500",
    "policy": "hf:/models/ckpt-500",
    "dataset": "demo:test",
    "questions_path": "/data/questions.json",
    "db_dir": "/data/db",
    "checkpoint": "/models/ckpt-500",
    "checkpoint_fingerprint": "abc123abc123",
    "generation": {
        "max_new_tokens": 48,
        "temperature": 0.7,
        "seed": 3,
        "threads": None,
        "policy": "hf",
        "checkpoint": "/models/ckpt-500",
        "device": "cpu",
        "dtype": "float32",
        "top_p": 1.0,
    },
    "environment": {"step_budget": 6},
    "samples": 4,
    "batch_size": 64,
    "limit": None,
    "seed": 3,
    "question_ids": None,
}
_LEGACY_ORACLE = {
    "name": "oracle",
    "policy": "oracle",
    "dataset": "demo",
    "questions_path": "/data/questions.json",
    "db_dir": "/data/db",
    "checkpoint": None,
    "checkpoint_fingerprint": None,
    "generation": {},
    "environment": {"step_budget": 10},
    "samples": 1,
    "batch_size": 16,
    "limit": 5,
    "seed": 0,
    "question_ids": ["q1", "q2"],
}


def _old_store(url: str, specs: list[dict[str, Any]]) -> None:
    """A store at revision 0001 holding runs with the given (old-layout) specs."""
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        for i, spec in enumerate(specs, start=1):
            conn.execute(
                text(
                    "INSERT INTO runs (id, name, policy, checkpoint, checkpoint_fingerprint, "
                    "dataset, spec, episodes_planned, status, created_at) VALUES (:id, :name, "
                    ":policy, :ckpt, :fp, :dataset, :spec, 1, 'completed', CURRENT_TIMESTAMP)"
                ),
                {
                    "id": i,
                    "name": spec["name"],
                    "policy": spec["policy"],
                    "ckpt": spec["checkpoint"],
                    "fp": spec["checkpoint_fingerprint"],
                    "dataset": spec["dataset"],
                    "spec": json.dumps(spec),
                },
            )
    engine.dispose()


def test_old_specs_upgrade_to_typed_settings_with_what_the_policy_reported_apart(
    store_url: str,
) -> None:
    _old_store(store_url, [_LEGACY_HF, _LEGACY_ORACLE])
    store = Store(store_url)  # a writer: migrates on open
    try:
        hf = store.find_run("ckpt-500")
        oracle = store.find_run("oracle")
        assert hf is not None and oracle is not None
        spec = RunSpec.from_stored(hf.spec)
        assert spec.generation == GenerationSettings(
            temperature=0.7, max_new_tokens=48, seed=3, batch_size=64, device="cpu", dtype="fp32"
        )
        assert spec.environment == EnvironmentSettings(step_budget=6)
        assert (spec.samples, spec.checkpoint, spec.kind) == (4, "/models/ckpt-500", "batch")
        assert "policy" not in hf.spec["generation"] and "checkpoint" not in hf.spec["generation"]
        assert hf.policy_info == {
            "name": "hf",
            "policy": "hf",
            "checkpoint": "/models/ckpt-500",
            "dtype": "float32",
            "fingerprint": "abc123abc123",
        }
        assert hf.checkpoint_fingerprint == "abc123abc123"
        spec = RunSpec.from_stored(oracle.spec)
        assert spec.generation == GenerationSettings(batch_size=16, seed=0)
        assert (spec.limit, spec.question_ids) == (5, ("q1", "q2"))
        assert oracle.policy_info is None
    finally:
        store.close()


def test_the_tolerant_reader_reads_an_old_layout_without_migrating() -> None:
    spec = RunSpec.from_stored(_LEGACY_HF)
    assert spec.generation.batch_size == 64 and spec.generation.dtype == "fp32"
    assert RunSpec.from_stored(spec.to_stored()) == spec


def test_upgrading_an_old_store_keeps_every_episode_and_step(store_url: str) -> None:
    """SQLite batch migrations copy and drop tables: with foreign keys on, dropping `runs`
    would delete every episode and step (ON DELETE CASCADE)."""
    _old_store(store_url, [_LEGACY_ORACLE])
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO episodes (id, run_id, question_id, sample_index, seed, db_id, "
                "question, gold_sql, started_at, ended_at, outcome, reward, progress, steps) "
                "VALUES (1, 1, 'q1', 0, 0, 'db', '?', 'SELECT 1', CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP, 'budget_exhausted', 0, 0, 3)"
            )
        )
        for step_no in (1, 2, 3):
            conn.execute(
                text(
                    "INSERT INTO steps (episode_id, step_no, prompt, raw_output, action, "
                    "argument, parsed, observation, reward, done, policy_seconds, env_seconds) "
                    "VALUES (1, :n, 'p', 'DESCRIBE t', 'DESCRIBE', 't', TRUE, 'o', 0, :t, 0, 0)"
                ),
                {"n": step_no, "t": step_no == 3},
            )
    engine.dispose()
    store = Store(store_url)
    try:
        detail = store.get_episode(1)
        assert detail is not None and [s.step_no for s in detail.steps] == [1, 2, 3]
        assert detail.summary.failure_class == "action_loop"  # back-filled from those steps
    finally:
        store.close()
