"""A file imported again after it changed: deleted bad lines, a grown file with a bad line, a
last line still being written, a file rewritten by a resumed trainer, a file grown while it was
read or after a stopped reading, step files that are links. Each adds exactly the rollouts the
run does not hold, and counts each bad line once."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from app.importers import importer as importer_module
from app.importers.rollouts import Rollout
from app.importers.verl import Verl
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.test_bad_input import notes_import
from tests.app.importers.writers import sql_prompt, sql_response


def _rollout(question: str, score: float = 1.0) -> dict[str, Any]:
    """One verl line (`_dump_generations`' fields): a query, its result, an answer."""
    output = sql_response([("<sql>SELECT 1</sql>", "1"), ("<solution>SELECT 1</solution>", None)])
    return {"input": sql_prompt(question), "output": output, "gts": "SELECT 1", "score": score,
            "step": 1}  # fmt: skip


def _write(path: Path, lines: list[Any], *, end: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(text + end, encoding="utf-8")
    return path


def _run(store: Store) -> tuple[int, int]:
    """(episodes, skipped lines) of the store's one run."""
    ((episodes, skipped),) = rows(
        store, "SELECT (SELECT count(*) FROM episodes), skipped_lines FROM runs"
    )
    return episodes, skipped


def test_deleting_bad_lines_and_importing_again_adds_nothing(store: Store, tmp_path: Path) -> None:
    good = [_rollout(f"Question {i}?") for i in range(4)]
    path = _write(tmp_path / "dump" / "1.jsonl", ["{bad", good[0], "[1]", *good[1:]])
    run_import(store, tmp_path / "dump")
    assert _run(store) == (4, 2)

    # The bad lines fixed by deleting them: every good line moves up, and none is new.
    _write(path, good)
    _, (result,) = run_import(store, tmp_path / "dump")
    assert (result.episodes, result.known, result.skipped) == (0, 4, 0)
    assert _run(store) == (4, 0)


def test_two_identical_lines_are_two_rollouts_and_each_is_held_once(
    store: Store, tmp_path: Path
) -> None:
    # Two samples can write the same text word for word (a short answer at low temperature).
    same = _rollout("How many singers are there?")
    path = _write(tmp_path / "dump" / "1.jsonl", [same, same])
    run_import(store, tmp_path / "dump")
    _write(path, [same, same, same])
    _, (result,) = run_import(store, tmp_path / "dump")
    # Grown: read on from the end of the last reading, the first two lines not read again.
    assert (result.episodes, result.known) == (1, 0)
    # Rewritten with a new first line: read whole, each of the three held rows found once.
    _write(path, [_rollout("Another question?"), same, same, same, same])
    _, (result,) = run_import(store, tmp_path / "dump")
    assert (result.episodes, result.known) == (2, 3)
    assert _run(store) == (5, 0)


def test_a_bad_line_of_a_growing_file_is_counted_once(store: Store, tmp_path: Path) -> None:
    lines: list[Any] = [_rollout("Question 0?"), "not json"]
    path = _write(tmp_path / "dump" / "1.jsonl", lines)
    for i in range(1, 4):
        run_import(store, tmp_path / "dump")
        assert _run(store) == (i, 1)
        lines.append(_rollout(f"Question {i}?"))
        _write(path, lines)
    assert rows(store, "SELECT skipped_lines FROM import_files ORDER BY id") == [(1,), (1,), (1,)]


def test_a_last_line_still_being_written_waits_for_the_next_import(
    store: Store, tmp_path: Path
) -> None:
    whole = json.dumps(_rollout("Question 1?"))
    path = _write(tmp_path / "dump" / "1.jsonl", [_rollout("Question 0?"), whole[:40]], end="")
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert _run(store) == (1, 0)
    assert notes == [
        "1.jsonl:2: the last line has no newline and is no rollout yet, left for the next "
        "import: not JSON (Unterminated string starting at column 11)"
    ]

    _write(path, [_rollout("Question 0?"), whole])
    _, (result,) = run_import(store, tmp_path / "dump")
    assert (result.episodes, result.known, result.skipped) == (1, 1, 0)
    # A complete last line without its newline is a rollout like any other.
    assert _run(store) == (2, 0)


def test_a_rewritten_file_adds_its_new_rollouts_and_keeps_the_old(
    store: Store, tmp_path: Path
) -> None:
    # A trainer resumed from a checkpoint plays a step again and writes its file anew.
    path = _write(tmp_path / "dump" / "2.jsonl", [_rollout("Question 0?", 0.0)] * 3)
    run_import(store, tmp_path / "dump")
    _write(path, [_rollout("Question 0?", 1.0), _rollout("Question 0?", 0.0),
                  _rollout("Question 0?", 0.5)])  # fmt: skip
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes == [
        "2.jsonl: 2 rows imported from it before are no longer in it (it was rewritten); "
        "the run keeps them, and the new rollouts make groups of their own"
    ]
    # The step's new samples are a group of their own: joined to the first reading's group,
    # its mean and advantages would mix two generations the trainer never compared.
    grouped = "SELECT group_index, group_concat(reward) FROM episodes GROUP BY 1 ORDER BY 1"
    assert rows(store, grouped) == [(0, "0.0,0.0,0.0"), (1, "1.0,0.5")]
    # Read again unchanged: nothing new, and nothing moves.
    _, (result,) = run_import(store, tmp_path / "dump")
    assert result.already and rows(store, grouped) == [(0, "0.0,0.0,0.0"), (1, "1.0,0.5")]


def test_a_file_rewritten_twice_counts_only_what_the_second_rewrite_dropped(
    store: Store, tmp_path: Path
) -> None:
    # Resumed from a checkpoint, a trainer writes the step's file anew; later a line of the
    # new file is repaired. The repair drops nothing the second version held: no note, and
    # the repaired line joins the second version's group.
    path = _write(tmp_path / "dump" / "2.jsonl", [_rollout("Question 0?", 0.0)] * 3)
    run_import(store, tmp_path / "dump")
    second = [_rollout("Question 0?", 1.0), _rollout("Question 0?", 0.5)]
    _write(path, ["not json", *second])
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes[-1].startswith("2.jsonl: 3 rows imported from it before are no longer in it")
    _write(path, [_rollout("Question 0?", 0.25), *second])
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes == []
    grouped = "SELECT group_index, count(*), sum(reward) FROM episodes GROUP BY 1 ORDER BY 1"
    assert rows(store, grouped) == [(0, 3, 0.0), (1, 3, 1.75)]
    # Each reading of the path says how many rows of earlier readings it no longer held.
    assert rows(store, "SELECT rows_gone FROM import_files ORDER BY id") == [(0,), (3,), (3,)]
    # A third rewrite that drops one of the second version's rows counts that one alone.
    _write(path, [_rollout("Question 0?", 0.25), second[0]])
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes == [
        "2.jsonl: 1 row imported from it before is no longer in it (it was rewritten); "
        "the run keeps them, and the new rollouts make groups of their own"
    ]
    assert rows(store, "SELECT rows_gone FROM import_files ORDER BY id") == [(0,), (3,), (3,), (4,)]


def test_the_rows_a_rewrite_dropped_are_marked_gone_until_a_version_holds_them_again(
    store: Store, tmp_path: Path
) -> None:
    gone = (
        "SELECT e.reward, s.gone_file_id FROM episodes e "
        "JOIN episode_sources s ON s.episode_id = e.id ORDER BY e.id"
    )
    path = _write(tmp_path / "dump" / "2.jsonl", [_rollout("Question 0?", 0.0)] * 3)
    run_import(store, tmp_path / "dump")
    assert rows(store, gone) == [(0.0, None)] * 3
    # Resumed, the trainer plays the step again: one new row has the bytes of an old one,
    # and which of three equal rows it is no file can say; two of them are gone.
    second = [_rollout("Question 0?", 1.0), _rollout("Question 0?", 0.0)]
    _write(path, second)
    run_import(store, tmp_path / "dump")
    assert rows(store, gone) == [(0.0, 2), (0.0, 2), (0.0, None), (1.0, None)]
    # Rewritten again, holding one of the dropped rows once more and dropping the 1.0: the
    # first mark stays with its reading, the row held again is no longer gone.
    _write(path, [_rollout("Question 0?", 0.0)] * 2)
    run_import(store, tmp_path / "dump")
    assert rows(store, gone) == [(0.0, 2), (0.0, None), (0.0, None), (1.0, 3)]
    # Appended to: the rows before the new line are the ones the last reading found.
    _write(path, [*[_rollout("Question 0?", 0.0)] * 2, _rollout("Question 0?", 0.5)])
    run_import(store, tmp_path / "dump")
    assert rows(store, gone)[-1] == (0.5, None)
    assert rows(store, gone)[:4] == [(0.0, 2), (0.0, None), (0.0, None), (1.0, 3)]


def test_a_rewritten_file_that_grows_keeps_its_count_and_its_group(
    store: Store, tmp_path: Path
) -> None:
    path = _write(tmp_path / "dump" / "2.jsonl", [_rollout("Question 0?", 0.0)] * 2)
    run_import(store, tmp_path / "dump")
    second = [_rollout("Question 0?", 1.0)]
    _write(path, second)
    run_import(store, tmp_path / "dump")
    _write(path, [*second, _rollout("Question 0?", 0.5)])  # appended: read from the end
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes == []
    assert rows(store, "SELECT rows_gone FROM import_files ORDER BY id") == [(0,), (2,), (2,)]
    grouped = "SELECT group_index, count(*), sum(reward) FROM episodes GROUP BY 1 ORDER BY 1"
    assert rows(store, grouped) == [(0, 2, 0.0), (1, 2, 1.5)]


def test_a_file_rewritten_whole_with_more_rows_adds_them_to_their_groups(
    store: Store, tmp_path: Path
) -> None:
    # A loop that writes its log anew each time (or a line repaired by hand): the rows the
    # run read are all still there, and the new ones are more samples of the same groups.
    first = [_rollout("Question 0?", 0.0), _rollout("Question 0?", 1.0)]
    path = _write(tmp_path / "dump" / "1.jsonl", ["not json", *first])
    run_import(store, tmp_path / "dump")
    _write(path, [_rollout("Question 0?", 0.5), *first])  # the bad line replaced
    _, notes = notes_import(store, tmp_path / "dump", "imported")
    assert notes == []
    grouped = "SELECT group_index, count(*), sum(reward) FROM episodes GROUP BY 1 ORDER BY 1"
    assert rows(store, grouped) == [(0, 3, 1.5)]


def test_rewritten_files_of_an_episode_each_make_one_new_group(
    store: Store, tmp_path: Path
) -> None:
    # rLLM logs a file an episode: a step played again rewrites each of its files, and the
    # new episodes of a task are one group, as the first ones were.
    from tests.app.importers.test_other_formats import _rllm_episode
    from tests.app.importers.writers import rllm_log_episode

    def play(correct: int) -> None:
        for sample in range(3):
            episode = _rllm_episode("task-a", sample, sample < correct)
            episode["metadata"] = {"attempt": correct}  # sampled again: no file is the same
            rllm_log_episode(tmp_path / "logs", episode, step=1)

    play(correct=1)
    run_import(store, tmp_path / "logs")
    play(correct=2)
    run_import(store, tmp_path / "logs")
    grouped = "SELECT group_index, group_concat(reward) FROM episodes GROUP BY 1 ORDER BY 1"
    assert rows(store, grouped) == [(0, "1.0,0.0,0.0"), (1, "1.0,1.0,0.0")]


def test_a_trl_file_held_by_an_earlier_digest_adds_only_its_new_rows(
    store: Store, tmp_path: Path
) -> None:
    # Earlier rollscopes took a Parquet row's digest of `json.dumps` of its values; a file
    # they imported, rewritten since by a resumed trainer, must not give its rows twice.
    import hashlib

    import pandas as pd

    def write(questions: list[str]) -> None:
        # As TRL's GRPOTrainer.log writes it: pandas `to_parquet`, a column per reward.
        pd.DataFrame(
            {
                "step": [1] * len(questions),
                "prompt": [[{"role": "user", "content": q}] for q in questions],
                "completion": [[{"role": "assistant", "content": "<solution>SELECT 1</solution>"}]]
                * len(questions),
                "exact": [1.0] * len(questions),
                "advantage": [0.0] * len(questions),
            }
        ).to_parquet(completions / "completions_00001.parquet")

    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    write(["Q0?", "Q1?"])
    run_import(store, tmp_path / "out")
    with closing(sqlite3.connect(store.url.removeprefix("sqlite:///"))) as conn, conn:
        for line, question in ((1, "Q0?"), (2, "Q1?")):
            values = {
                "advantage": 0.0,
                "completion": [{"content": "<solution>SELECT 1</solution>", "role": "assistant"}],
                "exact": 1.0,
                "prompt": [{"content": question, "role": "user"}],
                "step": 1,
            }
            earlier = json.dumps(values, ensure_ascii=False, sort_keys=True).encode()
            conn.execute(
                "UPDATE episode_sources SET sha256 = ? WHERE line = ?",
                (hashlib.sha256(earlier).digest(), line),
            )

    write(["Q0?", "Q1?", "Q2?"])
    _, (result,) = run_import(store, tmp_path / "out")
    assert (result.episodes, result.known) == (1, 2)
    assert rows(store, "SELECT question, count(*) FROM episodes GROUP BY question") == [
        ("Q0?", 1),
        ("Q1?", 1),
        ("Q2?", 1),
    ]


def test_step_files_that_are_links_are_read_where_the_folder_holds_them(
    store: Store, tmp_path: Path
) -> None:
    elsewhere = _write(tmp_path / "elsewhere" / "7.jsonl", [_rollout("Question 7?")])
    dump = tmp_path / "dump"
    _write(dump / "1.jsonl", [_rollout("Question 1?")])
    (dump / "2.jsonl").symlink_to(elsewhere)
    (dump / "3.jsonl").symlink_to(tmp_path / "gone.jsonl")  # a broken link
    (dump / "4.jsonl").mkdir()  # a folder named like a step file
    _, results = run_import(store, dump)
    assert [(r.path, r.episodes) for r in results] == [("1.jsonl", 1), ("2.jsonl", 1)]
    assert rows(store, "SELECT path FROM import_files ORDER BY id") == [("1.jsonl",), ("2.jsonl",)]


def _reading_with(monkeypatch: pytest.MonkeyPatch, act: Callable[[str], None]) -> None:
    """verl's reader, calling `act` with each line's question before making it a rollout."""
    reader = Verl.reader

    def acting(fmt: Verl, path: Path) -> Callable[[dict[str, Any]], Rollout]:
        rollout = reader(fmt, path)

        def read(data: dict[str, Any]) -> Rollout:
            made = rollout(data)
            act(made.question)
            return made

        return read

    monkeypatch.setattr(Verl, "reader", acting)


def test_a_file_grown_while_it_is_read_gives_its_new_lines_to_the_next_reading(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An appending writer (vf-eval, a trainer's long step) adds lines while the import reads.
    lines = [_rollout(f"Question {i}?") for i in range(3)]
    path = _write(tmp_path / "dump" / "1.jsonl", lines)

    def append_once(question: str) -> None:
        if question.endswith("Question 0?"):
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(_rollout("Question 3?")) + "\n")

    _reading_with(monkeypatch, append_once)
    _, (first,) = run_import(store, tmp_path / "dump")
    assert (first.episodes, first.known) == (3, 0)  # the file as its digest found it
    monkeypatch.undo()
    _, (second,) = run_import(store, tmp_path / "dump")
    assert (second.episodes, second.known) == (1, 0)
    assert rows(
        store, "SELECT s.line, substr(e.question, 21) FROM episode_sources s JOIN episodes e "
        "ON e.id = s.episode_id ORDER BY s.line"
    ) == [(i + 1, f"Question {i}?") for i in range(4)]  # fmt: skip
    assert rows(store, "SELECT bytes, rows, completed_at IS NOT NULL FROM import_files") == [
        (len(json.dumps(lines[0])) * 3 + 3, 3, 1),
        (path.stat().st_size, 4, 1),
    ]


def test_a_file_grown_after_a_stopped_reading_is_read_on_with_nothing_twice(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 1)
    lines: list[Any] = [_rollout("Question 0?"), "not json", _rollout("Question 1?")]
    path = _write(tmp_path / "dump" / "1.jsonl", lines)
    run_import(store, tmp_path / "dump")
    lines += [_rollout(f"Question {i}?") for i in (2, 3, 4)]
    _write(path, lines)

    def stop_at(question: str) -> None:
        if question.endswith("Question 3?"):
            raise KeyboardInterrupt

    _reading_with(monkeypatch, stop_at)
    with pytest.raises(KeyboardInterrupt):
        run_import(store, tmp_path / "dump")
    assert _run(store) == (3, 1)  # Question 2 written before the stop
    monkeypatch.undo()
    lines += [_rollout("Question 5?")]
    _write(path, lines)
    _, (result,) = run_import(store, tmp_path / "dump")
    # Read on from the last whole reading (line 4 on): the stopped reading's episode is held.
    assert (result.episodes, result.known, result.skipped) == (3, 1, 0)
    assert _run(store) == (6, 1)
    assert rows(
        store, "SELECT s.line, substr(e.question, 21) FROM episode_sources s JOIN episodes e "
        "ON e.id = s.episode_id ORDER BY s.line"
    ) == [(1, "Question 0?"), *((i + 2, f"Question {i}?") for i in range(1, 6))]  # fmt: skip
