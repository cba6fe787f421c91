"""Runs on Spider-layout files of one stem and no ids: each question's id is its position in
its file (`dev-0000`...), so an id can name another question in each run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.cli import rollscope

SPIDER = [{"db_id": "concerts", "question": q, "query": gold} for _, q, gold in QUESTIONS]
"""The benchmark as Spider's own dev.json holds it: no id field."""


def oracle_runs_of_same_stem(root: Path, files: dict[str, list[dict[str, Any]]]) -> Path:
    """The store of one oracle run per file, each file a `dev.json` of a folder of its own,
    the run named as its key."""
    _, db_dir = make_benchmark(root)
    path = root / "runs.db"
    for name, questions in files.items():
        (root / name).mkdir()
        (root / name / "dev.json").write_text(json.dumps(questions))
        done = rollscope(
            "run", "--policy", "oracle", "--questions", root / name / "dev.json",
            "--db-dir", db_dir, "--name", name, "--store", path, "--quiet",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    return path
