"""Revision 0021: each reading of an imported file counts the rows of earlier versions it no
longer holds (`import_files.rows_gone`). A store at 0020 upgrades with 0 for each path's first
whole reading and NULL for later ones, whose count was never taken; the importer reads NULL
as nothing dropped before, as rollscope did until then."""

from __future__ import annotations

import json
from pathlib import Path

from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response
from tests.support.plain_sql import sql_rows
from tests.support.store_files import downgrade_to

_READINGS = "SELECT path, rows_gone FROM import_files ORDER BY id"


def _write(path: Path, scores: list[float]) -> None:
    """A verl step file (`_dump_generations`' fields), a line a score."""
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    line = {"input": sql_prompt("How many?"), "output": output, "gts": "SELECT 1", "step": 1}
    lines = [json.dumps({**line, "score": score}) for score in scores]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_store_at_0020_counts_what_it_knows_and_leaves_the_rest_null(
    store_url: str, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    _write(dump / "1.jsonl", [1.0])
    _write(dump / "2.jsonl", [0.0, 0.0])
    store = Store(store_url)
    try:
        run_import(store, dump)
        _write(dump / "2.jsonl", [1.0])  # rewritten: both rows gone
        run_import(store, dump)
    finally:
        store.close()
    assert sql_rows(store_url, _READINGS) == [("1.jsonl", 0), ("2.jsonl", 0), ("2.jsonl", 2)]

    downgrade_to(store_url, "0020")
    columns = sql_rows(store_url, "SELECT * FROM import_files")
    assert len(columns[0]) == 10  # the column is gone

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None
        assert store.schema_upgrade.after == HEAD_REVISION
        assert sql_rows(store_url, _READINGS) == [
            ("1.jsonl", 0),
            ("2.jsonl", 0),
            ("2.jsonl", None),
        ]
        # Rewritten again: compared with every row the run read from the path, as before.
        _write(dump / "2.jsonl", [0.5, 1.0])
        notes: list[str] = []
        run_import(store, dump, on_note=notes.append)
    finally:
        store.close()
    assert sql_rows(store_url, _READINGS)[-1] == ("2.jsonl", 2)
    assert notes[-1].startswith("2.jsonl: 2 rows imported from it before are no longer in it")
