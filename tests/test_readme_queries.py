"""The README's "Query the store yourself" commands, run exactly as written on a store of an
oracle and a random run: plain SQL reads every error as text and every prompt as messages."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.registry import make_policy
from storage.store import Store
from tests.conftest import REPO
from tests.support.records import spec
from tests.support.stores import play_run


def _section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return text.split("## Query the store yourself", 1)[1].split("\n## ", 1)[0]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section(), re.S)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    store = Store(str(folder / "rollscope.db"))
    ds = load_named_dataset("demo")
    for name in ("oracle", "random"):
        play_run(store, spec(name, policy=name), ds, make_policy(name), group_seconds=0.25)
    store.close()
    return folder


def _shell_commands() -> list[str]:
    """Each command of the bash block (comments dropped, continued lines joined)."""
    (block,) = _blocks("bash")
    commands, current = [], ""
    for line in block.splitlines():
        if line.startswith("#") or not line.strip():
            if current:
                commands.append(current)
            current = ""
            continue
        current += ("\n" if current else "") + line
    return [*commands, current] if current else commands


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 command")
def test_the_readme_sqlite3_queries(demo_store: Path) -> None:
    errors, prompt = (
        subprocess.run(
            ["bash", "-c", c], cwd=demo_store, capture_output=True, text=True, check=True
        )
        for c in _shell_commands()
    )
    counted = [line.rsplit("|", 1) for line in errors.stdout.strip().splitlines()]
    assert len(counted) == 5 and all(e and int(n) > 0 for e, n in counted)
    messages = json.loads(prompt.stdout)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"].startswith("Question: ")


def test_the_readme_pandas_query(demo_store: Path) -> None:
    (block,) = _blocks("python")
    res = subprocess.run(
        [sys.executable, "-c", block], cwd=demo_store, capture_output=True, text=True, check=True
    )
    out = res.stdout
    assert re.search(r"oracle\s+1\.0", out) and re.search(r"random\s+0\.0", out), out
    assert "failure_class" in out and "correct" in out
