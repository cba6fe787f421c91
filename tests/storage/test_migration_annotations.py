"""Migration 0006: run tags move into annotations and back; forks' columns appear."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from storage.migrations import alembic_config
from storage.store import Store
from tests.support.store_files import downgrade_to


def _store_at(url: str, revision: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()


def test_run_tags_become_run_labels_and_come_back(store_url: str) -> None:
    _store_at(store_url, "0002")
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (id, name, policy, dataset, spec, episodes_planned, status, "
                "created_at, kind) VALUES (1, 'r', 'oracle', 'demo', '{}', 1, 'completed', "
                "CURRENT_TIMESTAMP, 'batch')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO run_tags (run_id, name, value) VALUES "
                "(1, 'sweep', 'lr-3e-5'), (1, 'stage', 'warmup')"
            )
        )
    engine.dispose()

    store = Store(store_url)  # a writer migrates on open
    try:
        assert store.run_tags(1) == {"sweep": "lr-3e-5", "stage": "warmup"}
        assert store.annotation_tags() == []  # run labels are not episode tags
        store.tag_run(1, "stage", "main")
    finally:
        store.close()

    downgrade_to(store_url, "0002")
    engine = create_engine(store_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT name, value FROM run_tags ORDER BY name")).all()
        tables = inspect(conn).get_table_names()
        episode_columns = {c["name"] for c in inspect(conn).get_columns("episodes")}
    engine.dispose()
    assert [tuple(r) for r in rows] == [("stage", "main"), ("sweep", "lr-3e-5")]
    assert "annotations" not in tables
    assert not {"forked_from", "fork_step"} & episode_columns
