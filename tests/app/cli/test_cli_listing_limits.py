"""The read commands' lists say when they are cut, and name each run once: `runs` past its
--limit, `tags --tag --json` past its --limit (with that tag's annotations alone), `export`
of one run named by name and by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from storage.store import Store
from tests.support.stores import correct_once_each


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs `r0`, `r1`, `r2` (#1-3) of three episodes each; episodes 1-3 tagged `x`,
    episode 1 also `other`."""
    path = tmp_path_factory.mktemp("limits") / "runs.db"
    store = Store(f"sqlite:///{path}")
    try:
        for i in range(3):
            correct_once_each(store, f"r{i}", range(3))
        for episode in (1, 2, 3):
            store.annotate(episode, "x", note=f"note {episode}")
        store.annotate(1, "other")
    finally:
        store.close()
    return path


def _invoke(*args: str | Path) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli, [str(a) for a in args])
    return done.exit_code, done.stdout, done.stderr


def test_runs_says_when_the_store_holds_more_than_the_limit(store_path: Path) -> None:
    code, listed, said = _invoke("runs", "--limit", "2", "--json", "--store", store_path)
    assert code == 0
    assert [r["name"] for r in json.loads(listed)] == ["r2", "r1"]
    assert "the newest 2 runs listed; the store holds more (--limit N)" in said
    code, listed, said = _invoke("runs", "--limit", "3", "--store", store_path)
    assert code == 0 and "r0" in listed and said == ""


def test_tags_json_says_when_cut_and_holds_the_tags_annotations_alone(store_path: Path) -> None:
    args = ("tags", "--tag", "x", "--json", "--store", store_path)
    code, listed, said = _invoke(*args, "--limit", "2")
    assert code == 0
    rows = json.loads(listed)
    assert len(rows) == 2
    assert "the first 2 episodes listed; --limit N for more" in said
    code, listed, said = _invoke(*args)
    rows = json.loads(listed)
    assert said == ""
    assert {r["episode_id"]: [a["tag"] for a in r["annotations"]] for r in rows} == {
        1: ["x"],
        2: ["x"],
        3: ["x"],
    }


def test_a_run_named_by_name_and_by_id_is_exported_once(store_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "both.jsonl"
    args = ("export", "--run", "r1", "--run", "2", "--output", out, "--store", store_path)
    code, said, _ = _invoke(*args)
    assert code == 0, said
    assert "wrote 3 episodes of 1 run" in said
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == [4, 5, 6]
