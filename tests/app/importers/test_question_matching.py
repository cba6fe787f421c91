"""An import without --questions lines up with rollscope's own runs by question text: an
episode whose question reads as one of theirs (case and spaces aside) takes its id, so that
Compare and the Question map set the runs side by side, whichever came first: a run imported
or recorded before rollscope played the question takes its id when it is imported again,
at a follow's next file, or at its Recorder's next write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.scripted import OraclePolicy
from storage.store import Store
from tests.app.importers.conftest import following, rows, run_import
from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.records import spec
from tests.support.stores import play_run


def test_an_import_takes_the_ids_of_questions_rollscope_played(
    store: Store, tmp_path: Path
) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    dataset = load_named_dataset(str(questions), db_dir=str(db_dir))
    oracle = play_run(store, spec("oracle"), dataset, OraclePolicy())
    (qid, text, gold), other = QUESTIONS[0], "A question no run of rollscope asked?"
    lines = [
        {"messages": [{"role": "user", "content": question},
                      {"role": "assistant", "content": f"<solution>{gold}</solution>"}],
         "reward": 1.0}
        for question in ("  " + text.upper().replace(" ", "   "), other)
    ]  # fmt: skip
    log = tmp_path / "chat.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    imported, _ = run_import(store, log, "chat", fmt="messages")
    ids = rows(store, "SELECT question_id FROM episodes WHERE run_id = ? ORDER BY id", imported)
    assert ids[0] == (qid,)  # the oracle run's id for that text
    assert ids[1][0].startswith("q-")  # no run played it: the id made from its text
    page = store.compare_runs([oracle, imported], limit=100)
    shared = [c for c in page.items if c.cells.keys() == {oracle, imported}]
    assert [c.question_id for c in shared] == [qid]


def test_the_recorder_takes_them_too(store: Store, tmp_path: Path) -> None:
    from app.recorder import Recorder

    questions, db_dir = make_benchmark(tmp_path / "bench")
    play_run(store, spec("oracle"), load_named_dataset(str(questions), db_dir=str(db_dir)),
             OraclePolicy())  # fmt: skip
    (qid, text, gold) = QUESTIONS[1]
    with Recorder(store, run="loop") as rec:
        turns = [{"role": "assistant", "content": f"<solution>{gold}</solution>"}]
        rec.episode(question=text.lower(), turns=turns, reward=1.0)
        rec.episode(question=text, question_id="mine-1", turns=turns, reward=1.0)
    ids = rows(store, "SELECT question_id FROM episodes e JOIN runs r ON r.id = e.run_id "
                      "WHERE r.name = 'loop' ORDER BY e.id")  # fmt: skip
    assert ids == [(qid,), ("mine-1",)]  # an id given stands


def test_questions_imported_before_rollscope_played_them_take_its_ids_at_the_next_import(
    store: Store, tmp_path: Path
) -> None:
    (qid, text, gold), other = QUESTIONS[0], "A question no run of rollscope asked?"
    answer = [{"role": "assistant", "content": f"<solution>{gold}</solution>"}]
    folder = tmp_path / "logs"
    folder.mkdir()

    def write(name: str, questions: list[str]) -> None:
        lines = [{"messages": [{"role": "user", "content": q}, *answer], "reward": 1.0}
                 for q in questions]  # fmt: skip
        (folder / name).write_text("".join(json.dumps(line) + "\n" for line in lines))

    write("a.jsonl", [text, text.upper(), other])
    notes: list[str] = []
    imported, _ = run_import(store, folder, "chat", fmt="messages")
    sql = "SELECT question_id, sample_index FROM episodes WHERE run_id = ? ORDER BY id"
    before = rows(store, sql, imported)
    assert before[0][0].startswith("q-") and before[0][0] == before[1][0]

    # Then rollscope plays the question, and the trainer writes another file.
    questions, db_dir = make_benchmark(tmp_path / "bench")
    dataset = load_named_dataset(str(questions), db_dir=str(db_dir))
    oracle = play_run(store, spec("oracle"), dataset, OraclePolicy())
    write("b.jsonl", [text])
    run_import(store, folder, "chat", fmt="messages", on_note=notes.append)
    assert rows(store, sql, imported) == [
        (qid, 0), (qid, 1), before[2], (qid, 2),  # the new file's episode follows them
    ]  # fmt: skip
    assert "1 question of the run (2 episodes) now carry the ids" in " ".join(notes)
    page = store.compare_runs([oracle, imported], limit=100)
    shared = [c for c in page.items if c.cells.keys() == {oracle, imported}]
    assert [c.question_id for c in shared] == [qid]
    assert shared[0].cells[imported].episodes == 3


def test_a_follow_matches_questions_rollscope_plays_while_it_runs(
    store: Store, tmp_path: Path
) -> None:
    import time

    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions

    (qid, text, gold) = QUESTIONS[0]
    folder = tmp_path / "logs"
    folder.mkdir()
    line = {"messages": [{"role": "user", "content": text},
                         {"role": "assistant", "content": f"<solution>{gold}</solution>"}],
            "reward": 1.0, "step": 1}  # fmt: skip
    (folder / "1.jsonl").write_text(json.dumps(line) + "\n")
    importer = Importer(store, format_of(folder, "messages"), ImportOptions(folder, "live"))
    run_id = importer.open()
    told: list[str] = []
    sql = "SELECT question_id, sample_index FROM episodes WHERE run_id = ? ORDER BY id"
    with following(importer, lambda r: told.append(r.path), on_note=told.append):
        deadline = time.monotonic() + 60
        while "1.jsonl" not in told:
            assert time.monotonic() < deadline, "the first file was not imported"
            time.sleep(0.05)
        assert rows(store, sql, run_id)[0][0].startswith("q-")
        # A checkpoint is evaluated meanwhile; then the trainer writes its next step.
        questions, db_dir = make_benchmark(tmp_path / "bench")
        dataset = load_named_dataset(str(questions), db_dir=str(db_dir))
        play_run(store, spec("oracle"), dataset, OraclePolicy())
        (folder / "2.jsonl").write_text(json.dumps({**line, "step": 2}) + "\n")
        while "2.jsonl" not in told:
            assert time.monotonic() < deadline, "the second file was not imported"
            time.sleep(0.05)
    importer.finish("completed")
    assert rows(store, sql, run_id) == [(qid, 0), (qid, 1)]


def test_a_recorder_run_resumed_takes_the_ids_of_questions_played_since(
    store: Store, tmp_path: Path
) -> None:
    from app.recorder import Recorder

    (qid, text, gold) = QUESTIONS[1]
    turns = [{"role": "assistant", "content": f"<solution>{gold}</solution>"}]
    with pytest.raises(RuntimeError), Recorder(store, run="loop") as rec:
        rec.episode(question=text, turns=turns, reward=1.0)
        raise RuntimeError("the trainer died")  # the run reads failed: it can be resumed
    questions, db_dir = make_benchmark(tmp_path / "bench")
    play_run(store, spec("oracle"), load_named_dataset(str(questions), db_dir=str(db_dir)),
             OraclePolicy())  # fmt: skip
    with Recorder(store, run="loop", resume=True) as rec:
        rec.episode(question=text, turns=turns, reward=1.0)
    ids = rows(store, "SELECT question_id, sample_index FROM episodes e JOIN runs r "
                      "ON r.id = e.run_id WHERE r.name = 'loop' ORDER BY e.id")  # fmt: skip
    assert ids == [(qid, 0), (qid, 1)]


def test_a_recorder_matches_questions_rollscope_plays_while_it_records(
    store: Store, tmp_path: Path
) -> None:
    from app.recorder import Recorder

    (qid, text, gold) = QUESTIONS[1]
    turns = [{"role": "assistant", "content": f"<solution>{gold}</solution>"}]
    sql = ("SELECT question_id, sample_index FROM episodes e JOIN runs r ON r.id = e.run_id "
           "WHERE r.name = 'loop' ORDER BY e.id")  # fmt: skip
    with Recorder(store, run="loop", flush_seconds=3600) as rec:
        rec.episode(question=text, turns=turns, reward=1.0)
        rec.flush()
        assert rows(store, sql)[0][0].startswith("q-")  # no rollscope run has asked it yet
        questions, db_dir = make_benchmark(tmp_path / "bench")
        play_run(store, spec("oracle"), load_named_dataset(str(questions), db_dir=str(db_dir)),
                 OraclePolicy())  # fmt: skip
        rec.flush()  # the next write, with nothing held: the run's questions are matched
        assert rows(store, sql) == [(qid, 0)]
        rec.episode(question=text, turns=turns, reward=1.0)
    assert rows(store, sql) == [(qid, 0), (qid, 1)]
