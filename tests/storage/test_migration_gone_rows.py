"""Revision 0022: an imported episode whose row a rewrite of its file dropped names the
reading that no longer found it (`episode_sources.gone_file_id`). A store at 0021 upgrades
with every row unmarked (which rows its rewrites dropped was never recorded), and the next
rewrite of a path marks all the rows of it that it no longer holds."""

from __future__ import annotations

import json
from pathlib import Path

from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response
from tests.support.plain_sql import sql_rows
from tests.support.store_files import downgrade_to

_MARKS = (
    "SELECT e.reward, s.gone_file_id FROM episodes e "
    "JOIN episode_sources s ON s.episode_id = e.id ORDER BY e.id"
)


def _write(path: Path, scores: list[float]) -> None:
    """A verl step file (`_dump_generations`' fields), a line a score."""
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    line = {"input": sql_prompt("How many?"), "output": output, "gts": "SELECT 1", "step": 2}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**line, "score": s}) + "\n" for s in scores), "utf-8")


def test_a_store_at_0021_upgrades_unmarked_and_the_next_rewrite_marks_the_path(
    store_url: str, tmp_path: Path
) -> None:
    step_file = tmp_path / "dump" / "2.jsonl"
    _write(step_file, [0.0, 0.25])
    store = Store(store_url)
    try:
        run_import(store, step_file.parent)
        _write(step_file, [1.0])  # rewritten: both rows gone
        run_import(store, step_file.parent)
    finally:
        store.close()
    assert sql_rows(store_url, _MARKS) == [(0.0, 2), (0.25, 2), (1.0, None)]

    downgrade_to(store_url, "0021")
    assert len(sql_rows(store_url, "SELECT * FROM episode_sources")[0]) == 7  # the column is gone

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None
        assert store.schema_upgrade.after == HEAD_REVISION
        assert sql_rows(store_url, _MARKS) == [(0.0, None), (0.25, None), (1.0, None)]
        # Rewritten again, holding the first play's 0.25: every row it no longer holds is
        # marked by this reading, the old ones as well.
        _write(step_file, [0.25, 0.5])
        run_import(store, step_file.parent)
    finally:
        store.close()
    assert sql_rows(store_url, _MARKS) == [(0.0, 3), (0.25, None), (1.0, 3), (0.5, None)]
