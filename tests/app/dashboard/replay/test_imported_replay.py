"""Replay and GRPO groups on imported runs: no fork form for steps rollscope did not play, long
completions in a bounded box, one line where token confidence is left out, a header in words,
and a query run again that says what an import lacks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import streamlit as st

from app.dashboard.components.render import BOX_PX, NO_REPLY, box_height
from app.dashboard.groups.detail import NO_CONFIDENCE
from app.dashboard.replay.tokens import NO_TOKENS
from app.dashboard.settings import ENV_READ_ONLY
from app.recorder import Recorder
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import (
    sql_prompt,
    sql_response,
    verifiers_write_episode,
    verl_dump,
)

LONG = "<b>bold</b> <script>alert(1)</script> " + "Z" * 50_000
"""A 50,000-character completion with HTML in it, as one audit store held."""


@dataclass(frozen=True)
class Imported:
    url: str
    verl: int
    """A verl run: one question's group of three at one training step."""
    chat: int
    """A chat log imported without --questions: one episode, no database."""
    chat_episode: int


def _chat_log(path: Path) -> Path:
    """One episode: a QUERY with its reply, then a very long turn with no answer."""
    messages = [
        {"role": "user", "content": "How many books?"},
        {"role": "assistant", "content": "<sql>SELECT COUNT(*) FROM books</sql>"},
        {"role": "tool", "content": "| 120 |"},
        {"role": "assistant", "content": LONG},
    ]
    path.write_text(json.dumps({"messages": messages, "reward": 0.0}) + "\n")
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    root = tmp_path_factory.mktemp("imported-replay")
    url = str(root / "store.db")
    store = Store(url)
    answered = sql_response(
        [("<sql>SELECT 1</sql>", "\n1\n"), ("<solution>SELECT 1</solution>", None)]
    )
    unanswered = sql_response([("<sql>SELECT 1</sql>", "\n1\n"), ("<sql>SELECT 2</sql>", "\n2\n")])
    verl_dump(
        root / "dump", 1, [sql_prompt("How many?")] * 3, [answered, answered, unanswered],
        ["SELECT 1"] * 3, [1.0, 0.0, 0.0], {},
    )  # fmt: skip
    verl, _ = run_import(store, root / "dump", "verl-grpo")
    chat, _ = run_import(store, _chat_log(root / "chats.jsonl"), "chat-log", fmt="messages")
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(chat,))).items
    store.close()
    return Imported(url, verl, chat, episode.id)


@pytest.fixture
def served(imported: Imported, monkeypatch: pytest.MonkeyPatch) -> Imported:
    """The store served writable, as a local dashboard is."""
    serve_env(monkeypatch, imported.url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    return imported


def _episode(url: str, run_id: int, sample: int = 0) -> int:
    store = Store(url, read_only=True)
    try:
        items = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    finally:
        store.close()
    return next(e.id for e in items if e.sample_index == sample)


def test_replay_says_why_an_imported_episode_cannot_be_forked(served: Imported) -> None:
    at = open_page("replay/page.py", episode=str(_episode(served.url, served.verl)), step="2")
    assert "Continue from this step with…" not in [s.value for s in at.subheader]
    assert not [b for b in at.button if b.label.startswith("Continue from step")]
    (line,) = [c.value for c in at.caption if "Not forkable" in c.value]
    assert "another framework's environment" in line
    assert "rollscope can only replay steps it played" in line


@pytest.fixture
def code_heights(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every st.code the page draws, with the height it asked for (AppTest does not keep it)."""
    calls: list[tuple[str, Any]] = []
    real = st.code

    def spy(body: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((str(body), kwargs.get("height")))
        return real(body, *args, **kwargs)

    monkeypatch.setattr(st, "code", spy)
    yield calls


def test_a_very_long_output_scrolls_in_a_bounded_box_whole(
    served: Imported, code_heights: list[tuple[str, Any]]
) -> None:
    at = open_page("replay/page.py", episode=str(served.chat_episode), step="2")
    assert LONG in [c.value for c in at.code]  # the whole text, as text, copyable
    assert (LONG, BOX_PX) in code_heights
    assert not any("<script" in m.value for m in at.markdown)
    short = [h for body, h in code_heights if body == "SELECT COUNT(*) FROM books"]
    assert short and all(h == "content" for h in short)


def test_an_imported_turn_without_sql_says_so_not_that_it_ran(served: Imported) -> None:
    at = open_page("replay/page.py", episode=str(served.chat_episode), step="2")
    # Step 2 in the player, then in the full transcript below it.
    assert [w.value for w in at.warning] == [
        "No SQL found in this turn: it is recorded as an unparsed step."
    ] * 2
    # Only step 1 (in the transcript) has a parsed action to show.
    assert [c.value for c in at.caption].count("parsed action: QUERY") == 1
    assert "Step 2 of 2: no SQL" in [h.value for h in at.subheader]
    assert any("**Step 2** · no SQL" in m.value for m in at.markdown)
    # Nothing answered the last turn: not an empty reply.
    captions = [c.value for c in at.caption]
    assert captions.count(NO_REPLY) == 2
    assert "(empty)" not in captions


def test_box_height_bounds_long_texts_only() -> None:
    assert box_height("SELECT 1") is None
    assert box_height("x\n" * 10) is None
    assert box_height("x\n" * 40) == BOX_PX
    assert box_height("Z" * 50_000) == BOX_PX


def test_replay_header_reads_in_words(served: Imported) -> None:
    at = open_page("replay/page.py", episode=str(served.chat_episode))
    (header,) = [c.value for c in at.caption if "sample 0" in c.value]
    assert "**budget exhausted**" in header and "budget_exhausted" not in header
    assert "· 2 steps ·" in header
    assert "database" not in header  # the import names none: no "database ·" with no value
    verl = open_page("replay/page.py", episode=str(_episode(served.url, served.verl, 0)))
    assert "**correct**" in texts(verl)


def test_replay_names_a_training_episodes_step_and_links_its_group(served: Imported) -> None:
    store = Store(served.url, read_only=True)
    (group,) = store.group_overview(served.verl).groups
    store.close()
    verl = open_page("replay/page.py", episode=str(_episode(served.url, served.verl, 2)))
    (header,) = [c.value for c in verl.caption if "sample 2" in c.value]
    assert header.endswith("· sample 2 · training step 1")
    (link,) = [p.proto for p in verl.get("page_link") if "group" in p.proto.label.lower()]
    assert (link.label, link.page) == ("Its GRPO group", "groups")
    assert link.query_string == (
        f"run={served.verl}&question={group.key.question_id}&group={group.key.group_index}"
    )
    # A chat log's episode has no training step, and its question one sample: no group.
    chat = open_page("replay/page.py", episode=str(served.chat_episode))
    assert "training step" not in texts(chat)
    assert not [p for p in chat.get("page_link") if "group" in p.proto.label.lower()]


def test_replay_names_the_advantage_a_trainer_gave_the_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "store.db")
    turns = [{"role": "assistant", "content": "ANSWER 6"}]
    with Recorder(url, run="trained", kind="training") as rec:
        rec.episode(question="How many?", turns=turns, reward=1.0, step=3, advantage=-0.75)
        rec.episode(question="How many?", turns=turns, reward=0.0, step=3)
    serve_env(monkeypatch, url)
    given, untold = _episode(url, 1, 0), _episode(url, 1, 1)
    (header,) = [c.value for c in open_page("replay/page.py", episode=str(given)).caption
                 if "sample 0" in c.value]  # fmt: skip
    assert header.endswith("· training step 3 · trainer's advantage -0.750")
    assert "advantage" not in texts(open_page("replay/page.py", episode=str(untold)))


def test_a_recorded_episode_says_what_it_records_of_sql_and_offers_no_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "store.db")
    turns = [
        {"role": "assistant", "content": "<sql>SELECT COUNT(*) FROM singer</sql>"},
        {"role": "tool", "content": "| 6 |"},
        {"role": "assistant", "content": "ANSWER 6"},
    ]
    with Recorder(url, run="looped") as rec:
        rec.episode(question="How many?", turns=turns, reward=1.0)
        rec.episode(question="How many?", turns=turns, reward=1.0, gold_sql="SELECT 6")
    serve_env(monkeypatch, url)
    untold, told = _episode(url, 1, 0), _episode(url, 1, 1)
    at = open_page("replay/page.py", episode=str(untold), step="1")
    # A Recorder keeps no database folder: a button that could only fail is not offered.
    assert "Run this query again" not in [b.label for b in at.button]
    at.toggle[0].set_value(True).run()
    hint = "This episode records no gold SQL (a Recorder's episode takes it as `gold_sql=`)."
    assert hint in texts(at)
    at = open_page("replay/page.py", episode=str(told))
    at.toggle[0].set_value(True).run()
    assert "SELECT 6" in [c.value for c in at.code]
    assert "Not run: a Recorder's run names no databases." in texts(at) and not at.error


def test_replay_says_token_confidence_is_left_out(served: Imported) -> None:
    at = open_page("replay/page.py", episode=str(served.chat_episode))
    assert [c.value for c in at.caption].count(NO_TOKENS) == 1


def test_run_query_again_says_an_import_names_no_databases(served: Imported) -> None:
    at = open_page("replay/page.py", episode=str(served.chat_episode), step="1")
    next(b for b in at.button if b.label == "Run this query again").click().run()
    (error,) = [e.value for e in at.error]
    assert "names no databases" in error and "re-run it with a current rollscope" not in error
    assert "\\-\\-questions F \\-\\-db\\-dir D" in error  # escaped: shown literally


def test_a_group_of_an_imported_run_says_confidence_is_left_out(served: Imported) -> None:
    store = Store(served.url, read_only=True)
    (group,) = store.group_overview(served.verl).groups
    store.close()
    key = group.key
    at = open_page(
        "groups/page.py", run=str(served.verl), question=key.question_id, group=str(key.group_index)
    )
    assert NO_CONFIDENCE in [c.value for c in at.caption]
    assert list(at.dataframe[0].value["outcome"]) == ["correct", "wrong", "budget exhausted"]


def test_replay_names_the_file_by_its_format_in_words(served: Imported) -> None:
    chat = texts(open_page("replay/page.py", episode=str(served.chat_episode)))
    assert "imported from chat log file `chats.jsonl`, line 1" in chat
    verl = texts(open_page("replay/page.py", episode=str(_episode(served.url, served.verl, 0))))
    assert "imported from verl rollout dump file `1.jsonl`, line 1" in verl


def test_groups_of_an_import_without_training_steps_are_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An evaluation's files name no training step: its groups are a question's samples, with
    # no training-step column of None and no word of training steps.
    lines = [
        {"messages": [{"role": "user", "content": "How many?"},
                      {"role": "assistant", "content": f"ANSWER {n}"}], "reward": float(n == 5)}
        for n in (5, 4, 5)
    ]  # fmt: skip
    log = tmp_path / "eval.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = Store(str(tmp_path / "store.db"))
    run, _ = run_import(store, log, "eval", fmt="messages")
    store.close()
    serve_env(monkeypatch, str(tmp_path / "store.db"))
    at = open_page("groups/page.py", run=str(run))
    (table,) = at.dataframe
    assert "training step" not in table.value.columns
    assert list(table.value["samples"]) == [3]
    assert "training step" not in texts(at)
    # Its "open" link (the question alone) opens the group, not the list again.
    (question_id,) = table.value["question id"]
    group = open_page("groups/page.py", run=str(run), question=question_id)
    assert [h.value for h in group.subheader][:1] == [f"Question {question_id}"]
    assert "samples" in [m.label for m in group.metric]
    # Training says the run has no step, and draws no empty step sections under it.
    training = open_page("training/page.py", run=str(run))
    assert any("carry no training step" in i.value for i in training.info)
    assert [h.value for h in training.subheader] == []
    # Replay of one of them links its group: the question's samples.
    replay = open_page("replay/page.py", episode=str(_episode(str(tmp_path / "store.db"), run)))
    (link,) = [p.proto for p in replay.get("page_link") if p.proto.label == "Its GRPO group"]
    assert link.query_string == f"run={run}&question={question_id}"


def test_replay_names_the_agent_of_a_line_of_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.dashboard.components.render import escape_markdown
    from tests.app.importers.test_verifiers_traces import _episode as v1_episode
    from tests.app.importers.test_verifiers_traces import _solver

    hostile = "<b>judge</b> *2*"
    line = v1_episode([_solver(), _solver(agent={"name": hostile, "trainable": True})])
    verifiers_write_episode(tmp_path / "run", line)
    url = str(tmp_path / "store.db")
    store = Store(url)
    run, _ = run_import(store, tmp_path / "run", "self-play")
    store.close()
    serve_env(monkeypatch, url)
    first = texts(open_page("replay/page.py", episode=str(_episode(url, run, 0))))
    assert '`traces.jsonl`, line 1, agent "agent" ·' in first  # verifiers' default name
    # The agent's name is the file's text, shown as written: escaped, not drawn as markup.
    second = texts(open_page("replay/page.py", episode=str(_episode(url, run, 1))))
    assert f'`traces.jsonl`, line 1, agent "{escape_markdown(hostile)}" ·' in second
