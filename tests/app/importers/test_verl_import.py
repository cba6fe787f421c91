"""verl rollout dumps of multi-turn SQL rollouts (files as `_dump_generations` writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.read_models import RunStep
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.benchmark import QUESTIONS, make_benchmark

GROUP = 4
PLAYED = QUESTIONS[:3]  # count, France, oldest
WRONG_SQL = "SELECT name FROM singer WHERE age > 40"


def _rollout(question: str, gold: str, sample: int) -> tuple[str, float]:
    """Two <sql> turns, each with its observation, then a <solution>: right for even samples."""
    answer = gold if sample % 2 == 0 else WRONG_SQL
    turns: list[tuple[str, str | None]] = [
        ("<think>Which tables?</think>\n<sql>SELECT name FROM sqlite_master</sql>", "\nsinger\n"),
        (f"<think>Try it.</think>\n<sql>{gold}</sql>", "\n| result |\n"),
        (f"<think>Done.</think>\n<solution>{answer}</solution>", None),
    ]
    return sql_response(turns), 1.0 if sample % 2 == 0 else 0.0


def write_run(root: Path, steps: tuple[int, ...] = (1, 2)) -> Path:
    dump = root / "rollout_data"
    for step in steps:
        inputs, outputs, gts, scores = [], [], [], []
        for _, question, gold in PLAYED:
            for sample in range(GROUP):
                output, score = _rollout(question, gold, sample)
                inputs.append(sql_prompt(question))
                outputs.append(output)
                gts.append(gold)
                scores.append(score)
        extra = {"acc": scores, "format_reward": [1.0] * len(scores), "short": [0.5]}
        verl_dump(dump, step, inputs, outputs, gts, scores, extra)
    return dump


def test_scores_are_rewards_groups_are_right_per_step_and_sql_turns_are_queries(
    store: Store, tmp_path: Path
) -> None:
    dump = write_run(tmp_path)
    run_id, results = run_import(store, dump, "verl-sql")
    n = len(PLAYED) * GROUP
    assert [(r.path, r.episodes, r.skipped) for r in results] == [
        ("1.jsonl", n, 0),
        ("2.jsonl", n, 0),
    ]
    run = store.get_run(run_id)
    assert run is not None
    assert (run.kind, run.source_format, run.source_path) == ("import", "verl", str(dump))
    assert (run.status, run.episodes_finished, run.episodes_planned) == ("completed", 2 * n, 2 * n)
    assert run.correct == n  # the even samples of each group, at both steps
    # One group per question per step, of GROUP episodes, numbered over the run.
    groups = rows(
        store,
        "SELECT train_step, group_index, count(*), count(DISTINCT question_id) FROM episodes "
        "WHERE run_id = ? GROUP BY train_step, group_index ORDER BY 1, 2",
        run_id,
    )
    assert [(s, c, q) for s, _, c, q in groups] == [(1, GROUP, 1)] * 3 + [(2, GROUP, 1)] * 3
    assert len({g for _, g, _, _ in groups}) == 6
    # The score is the reward, every numeric column of the row is kept by name (a reward extra
    # not as long as the batch, `short`, is not written by verl at all).
    named = rows(
        store,
        "SELECT r.name, count(*), sum(r.value) FROM episode_rewards r JOIN episodes e "
        "ON e.id = r.episode_id WHERE e.run_id = ? GROUP BY r.name ORDER BY r.name",
        run_id,
    )
    assert named == [("acc", 2 * n, n), ("format_reward", 2 * n, 2 * n), ("score", 2 * n, n)]
    assert rows(store, "SELECT sum(reward) FROM episodes WHERE run_id = ?", run_id) == [(n,)]
    # Turns are steps: the <sql> turns QUERY with their SQL, the <solution> an ANSWER.
    steps = rows(
        store,
        "SELECT s.step_no, s.action, s.argument, s.observation, s.parsed FROM steps s "
        "JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? AND e.question_id = "
        "(SELECT question_id FROM episodes WHERE run_id = ? ORDER BY id LIMIT 1) "
        "AND e.sample_index = 1 ORDER BY s.step_no",
        run_id,
        run_id,
    )
    assert steps == [
        (1, "QUERY", "SELECT name FROM sqlite_master", "singer", 1),
        (2, "QUERY", PLAYED[0][2], "| result |", 1),
        (3, "ANSWER", WRONG_SQL, None, 1),  # nothing answered the last turn
    ]
    # Generated and played elsewhere: no timing, seed or clock time is claimed.
    timed = "SELECT count(*) FROM steps WHERE policy_seconds IS NOT NULL OR env_seconds IS NOT NULL"
    assert rows(store, timed) == [(0,)]
    # verl writes no finish reason: whether an output was cut is not known.
    assert rows(store, "SELECT count(*) FROM steps WHERE truncated IS NOT NULL") == [(0,)]
    known = "seed IS NOT NULL OR started_at IS NOT NULL OR ended_at IS NOT NULL"
    assert rows(store, f"SELECT count(*) FROM episodes WHERE {known}") == [(0,)]
    classes = rows(
        store,
        "SELECT outcome, failure_class, count(*) FROM episodes WHERE run_id = ? GROUP BY 1, 2",
        run_id,
    )
    assert sorted(classes) == [("correct", "correct", n), ("wrong", "wrong_answer", n)]


def test_the_prompt_is_read_back_as_messages_and_the_question_from_it(
    store: Store, tmp_path: Path
) -> None:
    run_id, _ = run_import(store, write_run(tmp_path, (1,)), "verl-prompt")
    first = rows(store, "SELECT id FROM episodes WHERE run_id = ? ORDER BY id LIMIT 1", run_id)
    detail = store.get_episode(first[0][0])
    assert detail is not None
    assert detail.summary.question == f"Database: concerts. {PLAYED[0][1]}"
    assert [m["role"] for m in detail.steps[0].prompt] == ["system", "user"]
    assert detail.steps[0].prompt[0]["content"] == (
        "You are a data scientist. Think in <think>, run SQL in <sql>, answer in <solution>."
    )
    # Step 3 saw the question and both earlier turns with their observations.
    assert [m["role"] for m in detail.steps[2].prompt] == [
        "system", "user", "assistant", "user", "assistant", "user",
    ]  # fmt: skip
    assert detail.steps[2].prompt[3]["content"] == "singer"


def test_importing_again_adds_nothing_and_a_new_step_file_adds_only_itself(
    store: Store, tmp_path: Path
) -> None:
    dump = write_run(tmp_path, (1,))
    run_id, _ = run_import(store, dump, "twice")
    _, again = run_import(store, dump, "twice")
    assert [r.already for r in again] == [True]
    assert rows(store, "SELECT count(*) FROM episodes WHERE run_id = ?", run_id) == [(12,)]
    write_run(tmp_path, (2,))
    _, more = run_import(store, dump, "twice")
    assert [(r.path, r.already, r.episodes) for r in more] == [
        ("1.jsonl", True, 0),
        ("2.jsonl", False, 12),
    ]
    run = store.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert (run.episodes_finished, run.episodes_planned) == (24, 24)


def test_a_validation_dirs_steps_compare_as_checkpoints_on_the_same_questions(
    store: Store, tmp_path: Path
) -> None:
    # trainer.validation_data_dir: each evaluation the same questions, a file a step.
    dump = tmp_path / "validation_data"
    for step, right in ((50, (0,)), (100, (0, 1))):
        inputs, outputs, gts, scores = [], [], [], []
        for i, (_, question, gold) in enumerate(PLAYED):
            turns = [(f"<solution>{gold if i in right else WRONG_SQL}</solution>", None)]
            inputs.append(sql_prompt(question))
            outputs.append(sql_response(turns))
            gts.append(gold)
            scores.append(1.0 if i in right else 0.0)
        verl_dump(dump, step, inputs, outputs, gts, scores, {})
    run_id, _ = run_import(store, dump, "verl-val")
    first, last = RunStep(run_id, 50), RunStep(run_id, 100)
    outcomes = store.compare_outcomes([first, last])
    assert len(outcomes) == len(PLAYED)
    cells = [{k: c.correct for k, c in o.cells.items()} for o in outcomes]
    assert sorted(cells, key=lambda c: (c[first], c[last])) == [
        {first: 0, last: 0},
        {first: 0, last: 1},
        {first: 1, last: 1},
    ]


def test_questions_regrade_the_final_sql_apart_and_fill_a_missing_observation(
    store: Store, tmp_path: Path
) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    _, question, gold = PLAYED[1]  # France: two rows
    cut = sql_response(
        [("<sql>SELECT count(*) FROM singer</sql>", "\n5\n"), (f"<sql>{gold}</sql>", None)]
    )
    right = sql_response([(f"<solution>{gold}</solution>", None)])
    wrong = sql_response([("<solution>SELECT name FROM singer</solution>", None)])
    dump = tmp_path / "dump"
    # The file's own score says the wrong one is right: the re-grade says otherwise.
    verl_dump(dump, 7, [sql_prompt(question)] * 3, [cut, right, wrong], [gold] * 3,
              [0.0, 1.0, 1.0], {})  # fmt: skip
    run_id, _ = run_import(store, dump, "regraded", questions=str(questions), db_dir=str(db_dir))
    found = rows(
        store,
        "SELECT e.question_id, e.db_id, e.reward, e.outcome, s.regraded, s.filled_steps, s.line "
        "FROM episodes e JOIN episode_sources s ON s.episode_id = e.id WHERE e.run_id = ? "
        "ORDER BY s.line",
        run_id,
    )
    assert found == [
        ("q-france", "concerts", 0.0, "budget_exhausted", None, "[2]", 1),
        ("q-france", "concerts", 1.0, "correct", "correct", None, 2),
        ("q-france", "concerts", 1.0, "correct", "wrong", None, 3),
    ]
    filled = rows(
        store,
        "SELECT st.action, st.observation, st.error FROM steps st JOIN episodes e "
        "ON e.id = st.episode_id WHERE e.run_id = ? AND st.step_no = 2",
        run_id,
    )
    assert filled[0][0] == "QUERY" and "Ada" in filled[0][1] and "Cy" in filled[0][1]
    assert filled[0][2] is None
    # Played again in rollscope's environment: its signals are measured, its time is not.
    measured = "SELECT duration_seconds, progress, operational FROM episodes ORDER BY id"
    assert [(d, p is not None, o is not None) for d, p, o in rows(store, measured)] == [
        (None, True, True)
    ] * 3
    # Its queries ran here, so whether one failed is known: none did.
    assert rows(store, "SELECT DISTINCT has_sql_error FROM episodes") == [(0,)]


def test_an_unmatched_question_is_counted_not_graded(store: Store, tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    dump = tmp_path / "dump"
    verl_dump(dump, 1, [sql_prompt("Who wrote Hamlet?")], ["<solution>x</solution>"], [""],
              [0.0], {})  # fmt: skip
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions

    importer = Importer(
        store,
        format_of(dump, "auto"),
        ImportOptions(path=dump, name="unmatched", questions=str(questions), db_dir=str(db_dir)),
    )
    importer.open()
    for f in importer.files():
        importer.import_file(f)
    importer.finish("completed")
    assert importer.unmatched == 1
    assert rows(store, "SELECT regraded FROM episode_sources") == [(None,)]
    assert rows(store, "SELECT progress, operational FROM episodes") == [(None, None)]


@pytest.mark.parametrize("special_tokens", [False, True])
def test_turns_split_with_or_without_the_templates_special_tokens(
    store: Store, tmp_path: Path, special_tokens: bool
) -> None:
    dump = tmp_path / "dump"
    output = sql_response(
        [("<sql>SELECT 1</sql>", "\n1\n"), ("<solution>SELECT 1</solution>", None)],
        special_tokens=special_tokens,
    )
    verl_dump(dump, 1, [sql_prompt("Q?", special_tokens=special_tokens)], [output], [""],
              [1.0], {})  # fmt: skip
    run_import(store, dump, "tokens")
    assert rows(store, "SELECT step_no, raw_output, action, observation FROM steps ORDER BY 1") == [
        (1, "<sql>SELECT 1</sql>", "QUERY", "1"),
        (2, "<solution>SELECT 1</solution>", "ANSWER", None),
    ]
    assert rows(store, "SELECT question FROM episodes") == [("Database: concerts. Q?",)]


_WHERE_FROM = (
    "SELECT dataset, json_extract(spec, '$.questions_path'), json_extract(spec, '$.db_dir') "
    "FROM runs"
)


def test_questions_demo_names_the_demo_benchmark(store: Store, tmp_path: Path) -> None:
    """`--questions demo`, as `rollscope run --dataset demo`: ids and re-grades from the demo."""
    from rollout_core.datasets import load_named_dataset

    question = load_named_dataset("demo").questions[0]
    dump = tmp_path / "dump"
    output = sql_response([(f"<solution>{question.gold_sql}</solution>", None)])
    verl_dump(dump, 1, [sql_prompt(question.question)], [output], [""], [1.0], {})
    run_import(store, dump, "demo-graded", questions="demo")
    assert rows(store, "SELECT e.question_id, s.regraded FROM episodes e JOIN episode_sources s "
                "ON s.episode_id = e.id") == [(question.id, "correct")]  # fmt: skip
    # The run names the databases it was graded on: Replay and Compare run SQL there again.
    demo = load_named_dataset("demo")
    assert rows(store, _WHERE_FROM) == [("demo", str(demo.questions_path), str(demo.db_dir))]


def test_a_run_read_on_is_re_graded_against_its_own_questions_or_not_at_all(
    store: Store, tmp_path: Path
) -> None:
    from app.importers.importer import ImportFailure
    from rollout_core.datasets import load_named_dataset

    first, second = load_named_dataset("demo").questions[:2]
    dump = tmp_path / "dump"

    def dump_step(step: int, gold: str, question: str) -> None:
        output = sql_response([(f"<solution>{gold}</solution>", None)])
        verl_dump(dump, step, [sql_prompt(question)], [output], [""], [1.0], {})

    dump_step(1, first.gold_sql, first.question)
    run_import(store, dump, "graded", questions="demo")
    # Read on without --questions: the run's are taken again (it said nothing and left the
    # new episode un-graded, and its question under an id made from the text).
    dump_step(2, second.gold_sql, second.question)
    notes: list[str] = []
    run_import(store, dump, "graded", on_note=notes.append)
    assert rows(store, "SELECT e.question_id, s.regraded FROM episodes e JOIN episode_sources s "
                "ON s.episode_id = e.id ORDER BY e.id") == [(first.id, "correct"),
                                                            (second.id, "correct")]  # fmt: skip
    assert f"re-grading against {load_named_dataset('demo').questions_path}" in notes[0]
    # Other questions, or questions for a run imported without them, would leave it half
    # re-graded: refused, and nothing read.
    questions, db_dir = make_benchmark(tmp_path / "bench")
    with pytest.raises(ImportFailure, match=r"run 'graded' is re-graded against .*; import again"):
        run_import(store, dump, "graded", questions=str(questions), db_dir=str(db_dir))
    run_import(store, dump, "plain")
    with pytest.raises(ImportFailure, match="run 'plain' was imported without --questions"):
        run_import(store, dump, "plain", questions="demo")
    assert rows(store, "SELECT count(*) FROM episodes") == [(4,)]
    # The run's questions file gone since: said, not "pass 'demo' or a questions file",
    # which would then be refused as other questions.
    run_import(store, dump, "moved", questions=str(questions), db_dir=str(db_dir))
    questions.unlink()
    with pytest.raises(ImportFailure, match=r"run 'moved' is re-graded against .*, which is gone"):
        run_import(store, dump, "moved")


def test_without_questions_the_run_names_no_dataset(store: Store, tmp_path: Path) -> None:
    output = sql_response([("<sql>SELECT 1</sql>", "1"), ("I cannot tell.", None)])
    verl_dump(tmp_path / "dump", 1, [sql_prompt("Q?"), sql_prompt("R?")],
              [output, "SELECT"], ["", ""], [0.0, 0.0], {})  # fmt: skip
    run_import(store, tmp_path / "dump")
    assert rows(store, _WHERE_FROM) == [(None, None, None)]
    # Nor the databases and gold SQL, which the files do not hold: NULL, not ''; nor whether
    # a query failed, as none ran here.
    assert rows(store, "SELECT DISTINCT db_id, gold_sql, has_sql_error FROM episodes") == [
        (None, None, None)
    ]
    # A rollout whose turns end unanswered ran out of them; a one-turn completion that is not
    # right is simply wrong: no budget ran out.
    assert rows(store, "SELECT question, outcome FROM episodes ORDER BY id") == [
        ("Database: concerts. Q?", "budget_exhausted"),
        ("Database: concerts. R?", "wrong"),
    ]
    # Nothing measured what the file does not say: NULL, not 0.0.
    untimed = "SELECT duration_seconds, progress, operational FROM episodes"
    assert rows(store, untimed) == [(None, None, None)] * 2
    assert rows(store, "SELECT DISTINCT policy_seconds, env_seconds FROM steps") == [(None, None)]


def test_a_token_level_score_is_summed_and_kept_by_its_name(store: Store, tmp_path: Path) -> None:
    # `score` as a list of token-level rewards (older verl dumps): the total, under `score`,
    # as a scalar score is.
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(tmp_path / "dump", 1, [sql_prompt("Q?"), sql_prompt("R?")], [output, output],
              ["", ""], [[0.0, 0.25, 0.75], 0.5], {})  # type: ignore[list-item]  # fmt: skip
    run_import(store, tmp_path / "dump")
    named = (
        "SELECT e.reward, r.name, r.value FROM episodes e "
        "JOIN episode_rewards r ON r.episode_id = e.id ORDER BY e.id"
    )
    assert rows(store, named) == [(1.0, "score", 1.0), (0.5, "score", 0.5)]


def test_other_jsonl_files_beside_the_step_files_are_named_not_passed_over(
    store: Store, tmp_path: Path
) -> None:
    dump = write_run(tmp_path)
    notes: list[str] = []
    run_import(store, dump, "alone", on_note=notes.append)
    assert notes == []
    # '²' is a digit that int() refuses: the folder's files were sorted by int(stem), and raised.
    for name in ("val_3.jsonl", "notes.jsonl", "².jsonl"):
        (dump / name).write_text((dump / "1.jsonl").read_text())
    _, results = run_import(store, dump, "beside", on_note=notes.append)
    assert [r.path for r in results] == ["1.jsonl", "2.jsonl"]
    assert notes == [
        "read the <step>.jsonl files only, not 3 other .jsonl files (notes.jsonl, "
        "val_3.jsonl, ².jsonl); import one by its path, under another --name, to read it"
    ]
