"""The terminal's episode transcript (`rollscope show --prompt`): each prompt message's text,
and the fields beside it that its chat template showed the model."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from rich.console import Console

from app.render import episode_transcript, message_parts
from rollout_core.records import IterationBatch
from storage.store import Store
from tests.support.cli import rollscope
from tests.support.records import finish, spec, start, step

CALL = {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": "{}"}}


def test_a_message_is_its_text_and_its_other_fields_as_json() -> None:
    assert message_parts({"role": "user", "content": "Q?"}) == ("Q?", None)
    # OpenAI's assistant turn that only calls a tool: no content, which showed as 'null'.
    assert message_parts({"role": "assistant", "content": None, "tool_calls": [CALL]}) == (
        "",
        json.dumps({"tool_calls": [CALL]}),
    )
    parts = [{"type": "text", "text": "Q?"}]
    assert message_parts({"role": "user", "content": parts}) == (json.dumps(parts), None)


def test_each_prompt_is_titled_with_its_count_of_messages(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run = store.create_run(spec(), episodes_planned=1)
    one = ({"role": "user", "content": "Q?"},)
    two = (*one, {"role": "assistant", "content": None, "tool_calls": [CALL]})
    store.sink(run).write(
        IterationBatch(
            [start("q")],
            [step("q", 0, 1, prompt=one), step("q", 0, 2, prompt=two)],
            [finish("q", 0, "wrong", 0.0, 2)],
        )
    )
    (detail,) = store.iter_episode_details(run)
    console = Console(record=True, width=200)
    console.print(episode_transcript(detail, prompts=True))
    shown = console.export_text()
    assert "step 1 prompt: 1 message " in shown and "step 2 prompt: 2 messages " in shown
    assert json.dumps({"tool_calls": [CALL]}) in shown


def test_a_step_nothing_answered_reads_no_reply_and_an_empty_reply_empty(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run = store.create_run(spec(), episodes_planned=1)
    store.sink(run).write(
        IterationBatch(
            [start("q")],
            [
                step("q", 0, 1, observation=""),
                step("q", 0, 2, observation=None, error="no such table: t"),
                step("q", 0, 3, observation=None, done=True),
            ],
            [finish("q", 0, "wrong", 0.0, 3)],
        )
    )
    (detail,) = store.iter_episode_details(run)
    console = Console(record=True, width=200)
    console.print(episode_transcript(detail))
    shown = [line for line in console.export_text().splitlines() if "observation:" in line]
    assert [line.strip("│ ").removeprefix("observation: ") for line in shown] == [
        "(empty)",
        "Error: no such table: t",
        "(no reply)",
    ]


CONTROLS = "\x1b[2J\x1b]0;owned\x07\x9b31m"
"""Clear the screen, retitle the window, and CSI as one C1 character: a terminal obeys each."""


def test_the_terminal_is_shown_control_characters_never_sent_them(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(str(path))
    try:
        for name in ("run", "other"):
            run = store.create_run(spec(name), episodes_planned=1)
            out = (step("q", 0, 1, raw=f"out{CONTROLS}", observation=f"obs{CONTROLS}"),)
            store.sink(run).write(
                IterationBatch(
                    [start("q", text=f"q{CONTROLS}")], out, [finish("q", 0, "wrong", 0, 1)]
                )
            )
        store.annotate(1, "look", note=f"note{CONTROLS}")
    finally:
        store.close()
    # A name of a store written before run names had to be one line of text.
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE runs SET name = ? WHERE id = 1", (f"run{CONTROLS}",))
    shown = "".join(
        rollscope(*args, "--store", path).stdout
        for args in (
            ("show", "1", "--prompt"),
            ("runs",),
            ("tags", "--tag", "look"),
            ("compare", "1", "2"),
        )
    )
    assert not {"\x1b", "\x07", "\x9b"} & set(shown)
    assert shown.count("␛[2J␛]0;owned␇\ufffd31m") >= 7  # name thrice, question, output, obs, note


def test_a_huge_step_reward_reads_as_the_episodes_does(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run = store.create_run(spec(), episodes_planned=1)
    store.sink(run).write(
        IterationBatch(
            [start("q")],
            [step("q", 0, 1, reward=1e300, done=True)],
            [finish("q", 0, "correct", 1e300, 1)],
        )
    )
    (detail,) = store.iter_episode_details(run)
    console = Console(record=True, width=200)
    console.print(episode_transcript(detail))
    shown = console.export_text()
    assert "step 1  reward +1.000e+300" in shown and "reward 1.000e+300" in shown
    assert "0000000000" not in shown
