"""`--questions` with a question text asked on two databases (Spider's and BIRD's training
sets repeat some): an episode whose file names its database is matched on that database,
whatever the order of the questions file, and keeps it; one naming none is matched to
neither, and the import says why."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.importers.check import Checker
from app.importers.detect import format_of
from app.importers.importer import Importer, ImportOptions
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import skyrl_dump, verl_dump
from tests.support.benchmark import QUESTIONS, SCHEMA

COUNT_Q, COUNT_SQL = QUESTIONS[0][1], QUESTIONS[0][2]
# The same question on two databases of one schema: concerts holds 5 singers, festivals 3.
DATABASES = {"concerts": 5, "festivals": 3}
EPISODES = (
    "SELECT e.question_id, e.db_id, s.regraded FROM episodes e "
    "JOIN episode_sources s ON s.episode_id = e.id ORDER BY e.id"
)


def _questions(root: Path, order: list[str]) -> tuple[Path, Path]:
    """A Spider-layout questions file asking COUNT_Q on each database, in `order`, and the
    databases (`<db_dir>/<db_id>/<db_id>.sqlite`)."""
    db_dir = root / "database"
    for db_id, singers in DATABASES.items():
        (db_dir / db_id).mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(db_dir / db_id / f"{db_id}.sqlite")) as conn:
            conn.executescript(SCHEMA)
            conn.execute("DELETE FROM concert")
            conn.execute("DELETE FROM singer WHERE singer_id > ?", (singers,))
            conn.commit()
    path = root / f"questions-{'-'.join(order)}.json"
    entries = [{"id": f"{db}-count", "db_id": db, "question": COUNT_Q, "query": COUNT_SQL}
               for db in order]  # fmt: skip
    path.write_text(json.dumps(entries, indent=1))
    return path, db_dir


def _skyrl_prompt(db_id: str) -> str:
    """A decoded OmniSQL-style prompt (special tokens kept) naming its database."""
    return (
        f"<|im_start|>user\nDatabase: {db_id}\nQuestion:\n{COUNT_Q}\n<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("order", [["concerts", "festivals"], ["festivals", "concerts"]])
def test_an_episode_naming_its_database_is_regraded_on_it(
    store: Store, tmp_path: Path, order: list[str]
) -> None:
    questions, db_dir = _questions(tmp_path / "spider", order)
    # SkyRL-SQL keeps each rollout's database in `env_extras`; both answer 5 singers, right on
    # concerts and wrong on festivals.
    skyrl_dump(
        tmp_path / "export" / "dumped_evals" / "global_step_1_evals",
        input_prompts=[_skyrl_prompt("festivals"), _skyrl_prompt("concerts")],
        output_responses=["<solution>SELECT 5</solution>"] * 2,
        rewards=[0.0, 1.0],
        stop_reasons=["stop"] * 2,
        env_classes=["text2sql"] * 2,
        env_extras=[{"db_id": "festivals", "reward_spec": {"ground_truth": COUNT_SQL}},
                    {"db_id": "concerts", "reward_spec": {"ground_truth": COUNT_SQL}}],
        data_sources=["spider"] * 2,
        eval_metrics={},
    )  # fmt: skip
    run_import(store, tmp_path / "export", questions=str(questions), db_dir=str(db_dir))
    assert rows(store, EPISODES) == [
        ("festivals-count", "festivals", "wrong"),
        ("concerts-count", "concerts", "correct"),
    ]


def test_an_id_of_another_database_does_not_move_the_episode(store: Store, tmp_path: Path) -> None:
    questions, db_dir = _questions(tmp_path / "spider", ["concerts", "festivals"])
    # A chat log (docs/import.md, "A chat log") naming an id the file asks on concerts, but
    # played on festivals: the episode keeps its database, and takes that database's question.
    line = {
        "messages": [{"role": "user", "content": COUNT_Q},
                     {"role": "assistant", "content": "<solution>SELECT 5</solution>"}],
        "reward": 0.0, "question_id": "concerts-count", "db_id": "festivals",
    }  # fmt: skip
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps(line) + "\n")
    run_import(store, log, fmt="messages", questions=str(questions), db_dir=str(db_dir))
    assert rows(store, EPISODES) == [("festivals-count", "festivals", "wrong")]


def test_an_episode_naming_no_database_is_left_unmatched_and_said_so(
    store: Store, tmp_path: Path
) -> None:
    questions, db_dir = _questions(tmp_path / "spider", ["concerts", "festivals"])
    # verl's dump names no database: either question could be the one it played.
    prompt = f"<|im_start|>user\n{COUNT_Q}<|im_end|>\n<|im_start|>assistant\n"
    verl_dump(tmp_path / "dump", 1, [prompt] * 2, ["<answer>SELECT 5</answer>"] * 2,
              [COUNT_SQL] * 2, [1.0, 1.0], {})  # fmt: skip
    notes: list[str] = []
    checker = Checker(str(questions), str(db_dir), on_note=notes.append)
    options = ImportOptions(
        path=tmp_path / "dump", name="verl", questions=str(questions), db_dir=str(db_dir)
    )
    importer = Importer(store, format_of(options.path, "auto"), options, checker=checker)
    importer.open()
    for path in importer.files():
        importer.import_file(path)
    importer.finish("completed")

    assert importer.unmatched == 2
    stored = rows(store, EPISODES)
    assert [(db_id, regraded) for _, db_id, regraded in stored] == [(None, None)] * 2
    assert all(qid not in ("concerts-count", "festivals-count") for qid, _, _ in stored)
    assert notes == [
        f"{COUNT_Q!r} is asked on 2 databases of --questions (concerts, festivals), and the "
        "episodes asking it name none: left unmatched, not re-graded"
    ]
