"""An import without --questions lines up with rollscope's own runs by question text: an
episode whose question reads as one of theirs (case and spaces aside) takes its id, so that
Compare and the Question map set the runs side by side."""

from __future__ import annotations

import json
from pathlib import Path

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.scripted import OraclePolicy
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
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
