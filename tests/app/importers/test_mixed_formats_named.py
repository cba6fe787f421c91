"""A folder of rollouts of several formats: the import reads the format it tells from the
layout, and names the other formats' files it leaves unread, rather than pass them over."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from storage.store import Store
from tests.app.importers.conftest import rows, run_import


def test_the_files_of_another_format_beside_the_ones_read_are_named(
    store: Store, tmp_path: Path
) -> None:
    mix = tmp_path / "mix"
    mix.mkdir()
    pd.DataFrame(
        {
            "step": [1],
            "prompt": [[{"role": "user", "content": "Q?"}]],
            "completion": [[{"role": "assistant", "content": "<sql>SELECT 1</sql>"}]],
            "r": [1.0],
            "advantage": [0.0],
        }
    ).to_parquet(mix / "completions_00001.parquet")
    chat = {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "x"}]}
    (mix / "chats.jsonl").write_text(json.dumps({**chat, "reward": 1}) + "\n")
    verl = {"input": "user\nQ?\n", "output": "x", "score": 1, "step": 5}
    (mix / "5.jsonl").write_text(json.dumps(verl) + "\n")
    notes: list[str] = []
    run_import(store, mix, "mix", on_note=notes.append)
    assert notes == [
        "read the TRL completions files only, not 2 files of another format (5.jsonl (verl "
        "rollout dump), chats.jsonl (chat log)); import each by its path, under another "
        "--name, to read it"
    ]
    assert rows(store, "SELECT source_format, finished_episodes FROM runs") == [("trl", 1)]


def test_a_folder_of_one_format_names_nothing(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "chats"
    folder.mkdir()
    chat = {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "x"}]}
    for name in ("a.jsonl", "b.jsonl"):
        (folder / name).write_text(json.dumps({**chat, "reward": 1}) + "\n")
    notes: list[str] = []
    run_import(store, folder, "chats", on_note=notes.append)
    assert notes == []
    assert rows(store, "SELECT finished_episodes FROM runs") == [(2,)]
