"""A run re-graded against a questions file and its databases, read on with the same file and
other databases: the refusal names both folders, the run's and the one given."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.importers.importer import ImportFailure
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.benchmark import make_benchmark


def test_other_databases_for_the_same_questions_are_refused_naming_both_folders(
    store: Store, tmp_path: Path
) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    copy = tmp_path / "elsewhere" / "database"
    shutil.copytree(db_dir, copy)
    dump = tmp_path / "dump"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(dump, 1, [sql_prompt("Q?")], [output], [""], [1.0], {})
    run_import(store, dump, "graded", questions=str(questions), db_dir=str(db_dir))
    with pytest.raises(ImportFailure) as refused:
        run_import(store, dump, "graded", questions=str(questions), db_dir=str(copy))
    assert (
        f"is re-graded against {questions} (databases in {db_dir}), not {questions} "
        f"(databases in {copy});" in str(refused.value)
    )
    assert rows(store, "SELECT count(*) FROM episodes") == [(1,)]
