"""`rollscope runs` on a narrow terminal: every figure whole (a reward cut to `-0.0…` reads as
any other), the names giving way first, and policy and dataset left out, with a word, where
the figures need their room."""

from __future__ import annotations

import re
from pathlib import Path

from storage.store import Store
from tests.support.cli import rollscope_in_terminal
from tests.support.records import play, spec

_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_narrow_terminal_shows_every_figure_whole(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = Store(f"sqlite:///{db}")
    try:
        for name, reward in (("checkpoint-0-a-long-name", -0.06), ("checkpoint-100", -0.01)):
            run = store.create_run(spec(name, policy="hf:/a/long/checkpoint/path"),
                                   episodes_planned=1536)  # fmt: skip
            for q in range(3):
                store.sink(run).write(play(f"q{q}", 0, "wrong", reward, 2))
    finally:
        store.close()
    for columns, dropped in ((80, True), (140, False)):
        code, shown = rollscope_in_terminal("runs", "--store", db, columns=columns)
        text = _CONTROL.sub("", shown)
        assert code == 0, text
        lines = [line.rstrip() for line in text.splitlines()]
        assert all(len(line) <= columns for line in lines), text
        assert "3/1,536" in text and "-0.060" in text and "-0.010" in text, text
        header = next(line for line in lines if line.lstrip().startswith("id"))
        assert ("policy" not in header) is dropped, header
        assert ("policy and dataset left out at this width" in text) is dropped, text
        assert "name" in header
