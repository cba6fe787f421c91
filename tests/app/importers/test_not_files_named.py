"""Entries named like a format's step files that are no file (a broken link to a trainer's
step file, a folder, a pipe) are left out, and said to be: a step missing is noticed."""

from __future__ import annotations

import os
from pathlib import Path

from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump


def test_step_entries_that_are_no_file_are_named_and_the_files_imported(
    store: Store, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(dump, 1, [sql_prompt("Q?")] * 2, [output] * 2, [""] * 2, [1.0, 0.0], {})
    (dump / "2.jsonl").symlink_to(tmp_path / "gone" / "2.jsonl")
    (dump / "3.jsonl").mkdir()
    os.mkfifo(dump / "4.jsonl")
    notes: list[str] = []
    run_import(store, dump, "steps", "verl", on_note=notes.append)
    assert notes == [
        "left out 2.jsonl, 3.jsonl, 4.jsonl: named like verl rollout dump files, they are no "
        "file to read (a broken link, a folder or a pipe)"
    ]
    assert rows(store, "SELECT train_step, count(*) FROM episodes GROUP BY 1") == [(1, 2)]
