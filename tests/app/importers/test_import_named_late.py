"""What a folder names is read whatever came first: a run read on records the model its new
lines name when its first named none, and a verifiers folder of 0.4 runs (`traces.jsonl`)
beside an earlier version's evaluation (`results.jsonl`) is read folder by folder."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from tests.app.importers.writers import verifiers_save, verifiers_write_episode
from tests.support.cli import rollscope
from tests.support.plain_sql import sql_rows

TRACE = {
    "task": {"data": {"id": "t1", "prompt": "How many singers do we have?"}},
    "traces": [
        {
            "agent": {"name": "solver", "trainable": True},
            "nodes": [
                {"message": {"role": "user", "content": "How many singers do we have?"}},
                {
                    "message": {"role": "assistant", "content": "<solution>SELECT 6</solution>"},
                    "parent": 0,
                    "sampled": True,
                },
            ],
            "calls": [],
            "rewards": {"correct": {"score": 1.0, "weight": 1.0}},
        }
    ],
}


def test_each_folder_of_a_verifiers_tree_is_read_by_its_own_version(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    result = {
        "example_id": 0,
        "prompt": [{"role": "user", "content": "How many singers do we have?"}],
        "completion": [{"role": "assistant", "content": "<solution>SELECT 6</solution>"}],
        "reward": 1.0,
    }
    verifiers_save(outputs / "evals" / "sql--m" / "old", [result], {"model": "m"})
    verifiers_write_episode(outputs / "newrun", TRACE)
    store = tmp_path / "runs.db"
    done = rollscope("import", outputs, "--name", "both", "--store", store)
    assert done.returncode == 0, done.stderr
    read = sql_rows(f"sqlite:///{store}", "SELECT path, episodes FROM import_files ORDER BY path")
    assert read == [("evals/sql--m/old/results.jsonl", 1), ("newrun/traces.jsonl", 1)]


def test_a_run_read_on_records_the_model_its_new_lines_name(tmp_path: Path) -> None:
    folder, store = tmp_path / "chats", tmp_path / "runs.db"
    folder.mkdir()
    log = folder / "chats.jsonl"
    log.write_text(json.dumps(_chat(None)) + "\n")  # a first line that names no model
    args = ("import", folder, "--name", "live", "--format", "messages", "--store", store)
    assert rollscope(*args).returncode == 0
    assert _model(store) is None
    with log.open("a") as f:  # the trainer's logger names it from its second line on
        f.write(json.dumps(_chat("my-sft-7b")) + "\n")
    again = rollscope(*args)
    assert again.returncode == 0, again.stderr
    assert _model(store) == "my-sft-7b"


def _chat(model: str | None) -> dict[str, object]:
    line: dict[str, object] = {
        "messages": [
            {"role": "user", "content": "How many singers do we have?"},
            {"role": "assistant", "content": "<solution>SELECT 6</solution>"},
        ],
        "reward": 1.0,
    }
    return line if model is None else {**line, "model": model}


def _model(store: Path) -> str | None:
    """The followed run's model as the store holds it now (None before the store is made)."""
    try:
        with closing(sqlite3.connect(store)) as conn:
            found = conn.execute("SELECT checkpoint FROM runs WHERE name = 'live'").fetchone()
    except sqlite3.OperationalError:  # the follow is still making the store
        return None
    return None if found is None else found[0]
