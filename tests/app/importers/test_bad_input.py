"""Bad rows of every format: one line naming the file, the line and the problem, the rest
imported and the skipped lines counted on the run; `strict` stops at the first. Hostile text
is stored as text."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from app.importers.detect import format_of
from app.importers.importer import Importer, ImportFailure, ImportOptions
from storage.store import Store
from tests.app.importers.conftest import rows
from tests.app.importers.writers import rllm_log_episode, sql_prompt, sql_response
from tests.support.cli import in_process
from tests.support.postgres import PgServer

GOOD_VERL = {
    "input": sql_prompt("How many singers are there?"),
    "output": sql_response([("<solution>SELECT 1</solution>", None)]),
    "gts": "SELECT 1",
    "score": 1.0,
    "step": 1,
}


# Nodes of a verifiers v1 trace (verifiers/v1/graph.py `MessageNode`).
V1_USER = {"message": {"role": "user", "content": "Q?"}}
V1_ANSWER = {"parent": 0, "message": {"role": "assistant", "content": "ANSWER 1"}, "sampled": True}


def notes_import(
    store: Store, path: Path, name: str, fmt: str = "auto", **options: Any
) -> tuple[Importer, list[str]]:
    notes: list[str] = []
    importer = Importer(
        store, format_of(path, fmt), ImportOptions(path=path, name=name, **options),
        on_note=notes.append,
    )  # fmt: skip
    importer.open()
    try:
        for f in importer.files():
            importer.import_file(f)
    except ImportFailure as exc:
        importer.finish("failed", str(exc))
        raise
    importer.finish("completed")
    return importer, notes


def _jsonl(path: Path, lines: list[Any]) -> Path:
    """Lines as given: objects as JSON, bytes and text as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for line in lines:
            if isinstance(line, bytes):
                f.write(line + b"\n")
            elif isinstance(line, str):
                f.write(line.encode() + b"\n")
            else:
                f.write(json.dumps(line).encode() + b"\n")
    return path


KEPT = "the store keeps at most 200"
CHAT = {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}],
        "reward": 1.0}  # fmt: skip
IN_RANGE = "the store holds whole numbers from -2,147,483,648 to 2,147,483,647"
CASES: list[tuple[str, str, list[Any], list[str]]] = [
    (
        "verl",
        "dump/3.jsonl",
        ["{not json", {**GOOD_VERL, "output": 7}, {**GOOD_VERL, "score": "high"}, GOOD_VERL,
         {k: v for k, v in GOOD_VERL.items() if k != "input"}],
        ["3.jsonl:1: not JSON", "3.jsonl:2: 'output' is a number, not text",
         "3.jsonl:3: score is 'high', not a number", "3.jsonl:5: no 'input' field"],
    ),
    (
        "verl",
        "dump/7.jsonl",
        [{**GOOD_VERL, "step": float("nan")}, {**GOOD_VERL, "step": float("inf")},
         {**GOOD_VERL, "step": 3_000_000_000}, {**GOOD_VERL, "step": 2**70},  # read as a float
         {**GOOD_VERL, "step": -3}, GOOD_VERL],
        ["7.jsonl:1: step is nan, not a whole number", "7.jsonl:2: step is inf, not a whole number",
         f"7.jsonl:3: step is 3000000000, out of range: {IN_RANGE}",
         f"7.jsonl:4: step is 1.1805916207174113e+21, out of range: {IN_RANGE}"],
    ),
    (
        "skyrl",
        "dumped_evals/global_step_4000000000_evals/spider.jsonl",
        [{"input_prompt": "Q?", "output_response": "<solution>x</solution>", "score": 1}],
        [f"spider.jsonl:1: the step in the folder's name is 4000000000, out of range: {IN_RANGE}"],
    ),
    (
        "skyrl",
        "dumped_evals/global_step_5_evals/spider.jsonl",
        [{"input_prompt": "Q?", "output_response": "<solution>x</solution>", "score": ["a"]},
         {"input_prompt": "Q?", "output_response": "<solution>x</solution>", "score": 1},
         [1, 2]],
        ["spider.jsonl:1: score is ['a'], not a number",
         "spider.jsonl:3: a list, not a JSON object"],
    ),
    (
        "verifiers",
        "run/results.jsonl",
        [{"example_id": 1, "prompt": "Q?", "completion": 5, "reward": 1},
         {"example_id": 1, "prompt": "Q?", "completion": "ANSWER 1", "reward": 1},
         {"example_id": 2, "prompt": "Q?", "completion": [{"role": "user", "content": "x"}],
          "reward": 0}, {"example_id": 3, "prompt": "Q?", "completion": "ANSWER 2"}],
        ["results.jsonl:1: the assistant side is a number, not chat messages or text",
         "results.jsonl:3: 'completion' holds no assistant message",
         "results.jsonl:4: no 'reward' field"],
    ),
    (
        "verifiers",
        "run/traces.jsonl",
        [{"traces": "x"},
         {"traces": []},
         {"traces": [{"nodes": [V1_USER | {"parent": 1}, V1_ANSWER]}]},
         {"traces": [{"nodes": [V1_USER]}]},
         {"traces": [{"nodes": [V1_USER, V1_ANSWER], "rewards": {"exact": {"score": "high"}}}]},
         {"traces": [{"nodes": [V1_USER, V1_ANSWER], "rewards": {"exact": {"score": 1}}}]}],
        ["traces.jsonl:1: 'traces' is text, not a list of traces",
         "traces.jsonl:2: the episode holds no trace, and no error saying why",
         "traces.jsonl:3: the trace's nodes form no path from a first message to a last",
         "traces.jsonl:4: the trace holds no message a model call sampled",
         "traces.jsonl:5: the score of reward 'exact' is 'high', not a number"],
    ),
    (
        "messages",
        "chat.jsonl",
        [{"messages": "hello", "reward": 1},
         {"messages": [{"role": "user", "content": "Q?"}], "reward": 1},
         {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}]},
         {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}],
          "reward": float("nan")},
         {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}],
          "reward": 0.5, "step": 1.5},
         {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}],
          "reward": 0.5}],
        ["chat.jsonl:1: 'messages' is not a list of chat messages",
         "chat.jsonl:2: 'messages' holds no assistant message", "chat.jsonl:3: no 'reward' field",
         "chat.jsonl:4: reward is nan, not a finite number",
         "chat.jsonl:5: step is 1.5, not a whole number"],
    ),
    (
        "messages",
        "names.jsonl",
        [CHAT | {"question_id": "q" * 201}, CHAT | {"question_id": "q\x00"},
         CHAT | {"db_id": "d" * 201}, CHAT | {"rewards": {"r" * 201: 1.0}},
         CHAT | {"question_id": "q" * 200, "db_id": "d" * 200, "rewards": {"r" * 200: 1.0}}],
        [f"names.jsonl:1: question_id is 201 characters long; {KEPT}",
         "names.jsonl:2: question_id holds a NUL character, which the store cannot keep",
         f"names.jsonl:3: db_id is 201 characters long; {KEPT}",
         f"names.jsonl:4: the reward named {'r' * 40!r} is 201 characters long; {KEPT}"],
    ),
    (
        "verl",
        "dump/8.jsonl",
        [{**GOOD_VERL, "score": [1e308, 1e308]}, {**GOOD_VERL, "score": [-1e308, -1e308]},
         {**GOOD_VERL, "score": [1e308, -1e308]}],
        ["8.jsonl:1: score sums to inf, past what a float holds",
         "8.jsonl:2: score sums to -inf, past what a float holds"],
    ),
    (
        "verl",
        "dump/9.jsonl",
        [{**GOOD_VERL, "r" * 201: 1.0}, GOOD_VERL],
        [f"9.jsonl:1: the reward named {'r' * 40!r} is 201 characters long; {KEPT}"],
    ),
    (
        # Read by json as ints past a float: OverflowError, or past Python's 4,300 digits.
        "verl",
        "dump/10.jsonl",
        [json.dumps(GOOD_VERL).replace('"score": 1.0', '"score": 1' + "0" * 400),
         json.dumps(GOOD_VERL).replace('"step": 1', '"step": 1' + "0" * 5_000), GOOD_VERL],
        ["10.jsonl:1: score is inf, not a finite number",
         "10.jsonl:2: step is inf, not a whole number"],
    ),
    (
        # A tool call's arguments nested past the stack of Python's json: a RecursionError
        # ended the import (reading the line at 1,000 levels, writing its prompt at 990).
        "messages",
        "deep.jsonl",
        ['{"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A",'
         ' "tool_calls": [{"function": {"name": "q", "arguments": ' + "[" * n + "]" * n + "}}]}],"
         ' "reward": 1}' for n in (5_000, 990, 95)]
        # As a JSON string, read as the call's SQL when it does not parse (it raised too).
        + [CHAT | {"messages": [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "q", "arguments": "[" * 5_000 + "]" * 5_000}}]}]}, CHAT],
        [f"deep.jsonl:{i}: lists or objects nested more than 100 levels deep, past what the store "
         "keeps" for i in (1, 2, 3)],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "where", "lines", "told"), CASES, ids=[f"{c[0]}-{Path(c[1]).name}" for c in CASES]
)
def test_each_bad_line_is_told_and_counted_and_the_rest_imported(
    store: Store, tmp_path: Path, fmt: str, where: str, lines: list[Any], told: list[str]
) -> None:
    path = _jsonl(tmp_path / "src" / where, lines)
    root = tmp_path / "src" / where.split("/")[0] if "/" in where else path
    importer, notes = notes_import(store, root, f"bad-{fmt}", fmt)
    assert [n.removeprefix("skipped ").split(" (")[0] for n in notes] == [
        n.replace(path.name, path.relative_to(root).as_posix() if root != path else path.name)
        for n in told
    ]
    run = store.get_run(importer.run_id)
    assert run is not None and run.status == "completed"
    assert run.skipped_lines == len(told)
    assert run.episodes_finished == len(lines) - len(told)
    assert run.episodes_planned == run.episodes_finished


def test_rllm_and_trl_files_that_are_not_what_they_say(store: Store, tmp_path: Path) -> None:
    step = tmp_path / "logs" / "episodes" / "train_step_1_epoch_0"
    step.mkdir(parents=True)
    (step / "episode_hash1_id1.json").write_text('{"trajectories": [], "task": "x"}')
    (step / "episode_hash2_id2.json").write_text("{cut")
    deep = step / "episode_hash3_id3.json"
    deep.write_text('{"task": ' + "[" * 5000 + "]" * 5000 + "}")
    # Complete: a follow never took it (Python's json ran out of stack reading it).
    assert format_of(deep, "rllm").whole(deep)
    _, notes = notes_import(store, tmp_path / "logs", "bad-rllm")
    assert notes == [
        "skipped episodes/train_step_1_epoch_0/episode_hash1_id1.json:1: 'trajectories' is not "
        "a list of trajectories",
        "skipped episodes/train_step_1_epoch_0/episode_hash2_id2.json:1: not JSON (Expecting "
        "property name enclosed in double quotes at column 2)",
        "skipped episodes/train_step_1_epoch_0/episode_hash3_id3.json:1: lists or objects nested "
        "more than 100 levels deep, past what the store keeps",
    ]
    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    (completions / "completions_00001.parquet").write_bytes(b"PAR1 this is no parquet PAR1")
    # Two columns of one name (pyarrow writes them; pandas and so TRL do not).
    import pyarrow as pa
    import pyarrow.parquet as pq

    twice = pa.Table.from_arrays(
        [pa.array(["Q?"]), pa.array(["ANSWER 1"]), pa.array([1.0]), pa.array([0.0])],
        names=["prompt", "completion", "exact", "exact"],
    )
    pq.write_table(twice, completions / "completions_00002.parquet")
    importer, notes = notes_import(store, tmp_path / "out", "bad-trl")
    assert len(notes) == 2 and notes[0].startswith(
        "skipped completions/completions_00001.parquet: "
    )
    assert notes[1] == (
        "skipped completions/completions_00002.parquet: two columns are named 'exact': not a "
        "TRL completions file"
    )
    run = store.get_run(importer.run_id)
    assert run is not None and (run.skipped_lines, run.episodes_finished) == (2, 0)


def test_rewards_that_sum_past_a_float_are_bad_lines(store: Store, tmp_path: Path) -> None:
    # Each reward is finite; their sum is not. It stopped an import with a traceback (TRL's
    # fsum overflowed; rLLM's infinity had no count key), losing the batch in hand.
    import pandas as pd

    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    pd.DataFrame(  # as TRL's GRPOTrainer.log writes it: pandas `to_parquet`
        {
            "step": [1, 1],
            "prompt": [[{"role": "user", "content": "Q?"}]] * 2,
            "completion": [[{"role": "assistant", "content": "ANSWER 1"}]] * 2,
            "exact": [1e308, 1.0],
            "format": [1e308, 0.5],
        }
    ).to_parquet(completions / "completions_00001.parquet")
    importer, notes = notes_import(store, tmp_path / "out", "huge-trl")
    assert notes == [
        "skipped completions/completions_00001.parquet:1: its rewards sum to inf, past what a "
        "float holds"
    ]
    run = store.get_run(importer.run_id)
    assert run is not None and (run.skipped_lines, run.episodes_finished) == (1, 1)
    step = {"model_response": "ANSWER 1", "observation": "", "reward": 0.0}
    logs = tmp_path / "logs"
    for i, rewards in enumerate(([1e308, 1e308], [0.5, 0.25])):
        episode = {
            "id": f"e{i}",
            "task": {"question": "Q?"},
            "is_correct": True,
            "trajectories": [{"reward": r, "steps": [step]} for r in rewards],
        }
        rllm_log_episode(logs, episode, step=1)
    importer, notes = notes_import(store, logs, "huge-rllm")
    assert len(notes) == 1 and notes[0].endswith(
        ".json:1: its rewards sum to inf, past what a float holds"
    )
    run = store.get_run(importer.run_id)
    assert run is not None and (run.skipped_lines, run.episodes_finished) == (1, 1)


def test_strict_stops_at_the_first_bad_line_and_keeps_only_whole_episodes(
    store: Store, tmp_path: Path
) -> None:
    path = _jsonl(tmp_path / "dump" / "1.jsonl", [GOOD_VERL, GOOD_VERL, "{oops", GOOD_VERL])
    with pytest.raises(ImportFailure, match=r"^1\.jsonl:3: not JSON .*--strict stops"):
        notes_import(store, tmp_path / "dump", "strict", strict=True)
    assert rows(store, "SELECT status FROM runs") == [("failed",)]
    assert rows(store, "SELECT count(*) FROM episodes") == [(0,)]  # the batch was in hand
    assert rows(store, "SELECT completed_at IS NULL FROM import_files") == [(1,)]
    # Fixed, the file is read again, whole.
    _jsonl(path, [GOOD_VERL, GOOD_VERL, GOOD_VERL, GOOD_VERL])
    importer, _ = notes_import(store, tmp_path / "dump", "strict", strict=True)
    run = store.get_run(importer.run_id)
    assert run is not None and (run.status, run.episodes_finished) == ("completed", 4)


def test_hostile_text_is_stored_as_text(store: Store, tmp_path: Path) -> None:
    huge = "SELECT 1 " + "x" * 1_000_000
    hostile = "<script>alert('x')</script><b>bold</b>\x1b[31mred\x07\x00end"
    lines: list[Any] = [
        {**GOOD_VERL, "output": hostile},
        {**GOOD_VERL, "output": huge},
        json.dumps({**GOOD_VERL, "output": "OUT"}).encode().replace(b"OUT", b"bad \xff\xfe bytes"),
        {**GOOD_VERL, "output": "lone \ud800 surrogate"},
    ]
    _jsonl(tmp_path / "dump" / "1.jsonl", lines)
    _importer, notes = notes_import(store, tmp_path / "dump", "hostile")
    assert notes == []
    stored = [r[0] for r in rows(store, "SELECT raw_output FROM steps ORDER BY episode_id")]
    assert stored == [
        hostile.replace("\x00", "\ufffd"),
        huge,
        "bad \ufffd\ufffd bytes",
        "lone \ufffd surrogate",
    ]


def test_an_import_with_no_good_line_fails_and_leaves_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A wrong --format reads every line as bad: exit 2, the first problem named, and no empty
    # run under the name, so the same command with the right format works.
    good = {"messages": [{"role": "user", "content": "How many?"},
                         {"role": "assistant", "content": "ANSWER 1"}], "reward": 1.0}  # fmt: skip
    path = _jsonl(tmp_path / "log" / "chat.jsonl", ["not json", {"x": 1}])
    db = tmp_path / "store.db"
    code, said = in_process(monkeypatch, capsys, "import", path, "--format", "messages",
                            "--name", "chat", "--store", db)  # fmt: skip
    assert code == 2
    assert "no rollout in" in said and "every line read was bad (2 lines; first:" in said
    assert "chat.jsonl:1: not JSON" in said and "check --format" in said
    assert _plain(db, "SELECT count(*) FROM runs") == [(0,)]

    _jsonl(path, [good])
    code, said = in_process(monkeypatch, capsys, "import", path, "--format", "messages",
                            "--name", "chat", "--store", db)  # fmt: skip
    assert code == 0, said
    assert "chat.jsonl: 1 episode\n" in said
    assert _plain(db, "SELECT r.name, r.status, count(e.id) FROM runs r JOIN episodes e") == [
        ("chat", "completed", 1)
    ]


def _plain(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def test_a_file_of_bad_lines_read_on_into_a_run_keeps_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"messages": [{"role": "user", "content": "How many?"},
                         {"role": "assistant", "content": "ANSWER 1"}], "reward": 1.0}  # fmt: skip
    folder = tmp_path / "log"
    _jsonl(folder / "a.jsonl", [good])
    db = tmp_path / "store.db"
    args = ("import", folder, "--format", "messages", "--name", "chat", "--store", db)
    assert in_process(monkeypatch, capsys, *args)[0] == 0
    _jsonl(folder / "b.jsonl", ["not json"])
    code, said = in_process(monkeypatch, capsys, *args)
    assert code == 2 and "every line read was bad (1 line; first: b.jsonl:1" in said
    assert _plain(db, "SELECT status, skipped_lines FROM runs") == [("completed", 1)]
    assert _plain(db, "SELECT count(*) FROM episodes") == [(1,)]


@pytest.mark.postgres
def test_names_postgresql_would_refuse_are_bad_lines_there_too(
    tmp_path: Path, postgres_server: PgServer
) -> None:
    # PostgreSQL refused the batch holding such a line: the import stopped with a traceback.
    lines = [CHAT | {"question_id": "q" * 201}, CHAT | {"question_id": "q\x00"},
             CHAT | {"rewards": {"r" * 201: 1.0}}, CHAT | {"question_id": "q1"}]  # fmt: skip
    path = _jsonl(tmp_path / "chat.jsonl", lines)
    with postgres_server.database("rollscope_names") as url:
        store = Store(url)
        try:
            importer, notes = notes_import(store, path, "names", "messages")
            run = store.get_run(importer.run_id)
            assert run is not None
            assert (run.status, run.episodes_finished, run.skipped_lines) == ("completed", 1, 3)
            assert [n.split(": ")[1] for n in notes] == [
                f"question_id is 201 characters long; {KEPT}",
                "question_id holds a NUL character, which the store cannot keep",
                f"the reward named {'r' * 40!r} is 201 characters long; {KEPT}",
            ]
        finally:
            store.close()
