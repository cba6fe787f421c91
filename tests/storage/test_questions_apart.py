"""Question ids two compared sides share but ask different questions under (two files that
number their questions by position): found from each side's lowest episode of the id, set
against the first side that played it, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from rollout_core.records import IterationBatch
from storage import aggregates
from storage.read_models import IdApart, RunKey, RunStep
from storage.store import Store
from tests.support.records import finish, spec, start, step

Asked = dict[str, tuple[str, str]]
"""question id -> (database, question) as a run's episodes ask it ("": none, stored NULL)."""

BASE: Asked = {
    "q0": ("concert_singer", "How many singers do we have?"),
    "q1": ("concert_singer", "What is the average age of all singers?"),
    "q2": ("concert_singer", "List the names of the stadiums."),
    "q3": ("concert_singer", "How many concerts are there?"),
    "q4": ("car_1", "What are the car makers?"),
}
OTHER: Asked = {
    "q0": ("concert_singer", "  how many SINGERS\ndo we have? "),  # case and spacing only
    "q1": ("concert_singer", "Show the name and country of every singer."),  # another text
    "q2": ("pets_1", "List the names of the stadiums."),  # another database
    # An import that kept the whole prompt around the question, and named no database.
    "q3": ("", "Answer with SQL.\nQuestion: How many concerts are there?\nTables: concert"),
    "q4": ("", "Which countries make cars?"),  # no database to tell: the text does
    "q9": ("car_1", "A question the baseline did not play."),
}


def _play(store: Store, run: int, asked: Asked, *, samples: int = 2, **origin: int) -> None:
    sink = store.sink(run)
    for q, (db_id, text) in asked.items():
        for sample in range(samples):
            sink.write(
                IterationBatch(
                    started=[start(q, sample, db_id=db_id, text=text, **origin)],
                    steps=[step(q, sample, 1, action="ANSWER", done=True, reward=1.0)],
                    finished=[finish(q, sample, "correct", 1.0, 1)],
                )
            )


def _run(store: Store, name: str, asked: Asked, **kw: object) -> int:
    # A file of its own, as the files of one stem that number their questions by position:
    # sides on one questions file are taken to number it alike.
    kw.setdefault("questions_path", f"/data/{name}/dev.json")
    run = store.create_run(spec(name, **kw), episodes_planned=None)
    _play(store, run, asked)
    return run


def _found(apart: list[IdApart]) -> list[tuple[str, RunKey, str, RunKey, str]]:
    return [(a.question_id, a.key, a.question, a.against, a.against_question) for a in apart]


def test_ids_asking_another_question_are_found_against_the_baseline(store: Store) -> None:
    base = _run(store, "full", BASE)
    other = _run(store, "sub", OTHER)
    outcomes, apart = store.compare_outcomes_apart([base, other])
    assert _found(apart) == [
        ("q1", other, OTHER["q1"][1], base, BASE["q1"][1]),
        ("q2", other, OTHER["q2"][1], base, BASE["q2"][1]),
        ("q4", other, OTHER["q4"][1], base, BASE["q4"][1]),
    ]
    # The counts are compare_outcomes' own: which cells pair is Compare's to decide.
    assert outcomes == store.compare_outcomes([base, other])
    # The other way round, the other run is the one set against.
    _, reverse = store.compare_outcomes_apart([other, base])
    assert [(a.question_id, a.key, a.against) for a in reverse] == [
        (q, base, other) for q in ("q1", "q2", "q4")
    ]


def test_an_id_the_baseline_did_not_play_is_set_against_the_first_side_that_did(
    store: Store,
) -> None:
    base = _run(store, "full", {"q0": BASE["q0"]})
    a = _run(store, "a", {"q0": BASE["q0"], "q7": BASE["q1"]})
    b = _run(store, "b", {"q0": OTHER["q1"], "q7": BASE["q2"]})
    _, apart = store.compare_outcomes_apart([base, a, b])
    assert [(x.question_id, x.key, x.against) for x in apart] == [("q0", b, base), ("q7", b, a)]


def test_a_training_step_is_a_side_of_its_own(store: Store) -> None:
    base = _run(store, "full", BASE)
    trained = store.create_run(spec("grpo", kind="training"), episodes_planned=None)
    _play(store, trained, {"q0": BASE["q0"]}, train_step=10)
    _play(store, trained, {"q1": OTHER["q1"]}, train_step=20)
    keys: list[RunKey] = [base, RunStep(trained, 20), trained]
    _, apart = store.compare_outcomes_apart(keys)
    assert [(x.question_id, x.key, x.against) for x in apart] == [
        ("q1", RunStep(trained, 20), base),
        ("q1", trained, base),
    ]


@pytest.mark.parametrize("chunk", [1, 50])
def test_many_shared_ids_are_read_in_chunks(
    store: Store, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aggregates, "_IN_CHUNK", chunk)
    n = 12 if chunk == 1 else 120  # chunks whole and one part-filled
    asked: Asked = {f"dev-{i:04d}": ("concert_singer", f"Question number {i}?") for i in range(n)}
    # The copy is the file reversed: its ids name other questions, but for the middle one
    # the two share (an odd count has one).
    reversed_copy = dict(zip(asked, reversed(asked.values()), strict=True))
    base = _run(store, "full", asked)
    other = _run(store, "reversed", reversed_copy)
    _, apart = store.compare_outcomes_apart([base, other])
    assert [a.question_id for a in apart] == list(asked)  # n is even: every id is apart
    assert apart[0].question == f"Question number {n - 1}?"


def test_the_question_shown_for_an_id_is_the_first_sides(store: Store) -> None:
    # Compare's question list shows the id's text as the baseline asks it, whichever run
    # wrote its episodes first.
    first_written = _run(store, "sub", OTHER)
    baseline = _run(store, "full", BASE)
    shown = store.compare_question([baseline, first_written], "q1")
    assert shown is not None and shown.question == BASE["q1"][1]
    page = store.compare_runs([baseline, first_written], with_episode_ids=False)
    assert {r.question_id: r.question for r in page.items}["q1"] == BASE["q1"][1]


def test_sides_on_one_questions_file_are_taken_to_number_it_alike(store: Store) -> None:
    # Their texts are not read: runs on one dataset, the usual comparison, pay nothing for the
    # check (a file edited between two runs on it goes unseen; --resume refuses it in a run).
    base = _run(store, "full", BASE, questions_path="/data/dev.json")
    edited = _run(store, "edited", OTHER, questions_path="/data/dev.json")
    imported = _run(store, "imported", OTHER, questions_path="")
    _, apart = store.compare_outcomes_apart([base, edited, imported])
    assert {(a.key, a.against) for a in apart} == {(imported, base)}
