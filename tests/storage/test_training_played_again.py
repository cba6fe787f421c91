"""A training run whose step file a resumed trainer rewrote: the Training page's reads take
the step as its file holds it now, and count the earlier play they leave out."""

from __future__ import annotations

import json
from pathlib import Path

from storage.read_models import GroupKey, RunStep
from storage.store import Store
from storage.training import (
    NamedRewardStep,
    PlayedAgain,
    finished_steps,
    named_reward_steps,
    played_again,
    played_steps,
    question_episodes,
    replaced_groups,
    run_at_step,
    training_questions,
    training_steps,
)
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response


def _write_step(dump: Path, step: int, scores: list[float]) -> None:
    """verl's step file (`_dump_generations`: `{global_step}.jsonl`), one question's group."""
    output = sql_response([("<sql>SELECT 1</sql>", "1"), ("<solution>SELECT 1</solution>", None)])
    line = {"input": sql_prompt("How many heads?"), "output": output, "gts": "SELECT 1",
            "step": step}  # fmt: skip
    dump.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({**line, "score": s}) + "\n" for s in scores)
    (dump / f"{step}.jsonl").write_text(text, encoding="utf-8")


def test_a_rewritten_step_is_read_as_its_file_holds_it_now(store: Store, tmp_path: Path) -> None:
    dump = tmp_path / "rollouts"
    _write_step(dump, 1, [1.0, 0.0])
    _write_step(dump, 2, [0.0, 0.0, 0.0])
    run_id, _ = run_import(store, dump)
    assert played_again(store, run_id) == PlayedAgain({})
    assert [s.episodes for s in training_steps(store, run_id)] == [2, 3]

    # The trainer crashed after step 2, resumed from step 1's checkpoint and played step 2
    # again: its file now holds the new play alone.
    _write_step(dump, 2, [1.0, 1.0, 0.5])
    run_import(store, dump)
    first, second = training_steps(store, run_id)
    assert (second.train_step, second.episodes, second.groups) == (2, 3, 1)
    assert second.reward == 2.5 / 3
    assert first.episodes == 2
    assert played_again(store, run_id) == PlayedAgain({2: 3})
    (question,) = training_questions(store, run_id)
    # The first play of step 2 was group 1; the second is group 2, whole in its file.
    assert replaced_groups(store, run_id) == {GroupKey(question.question_id, 1, 2): 3}

    assert (question.episodes, question.first_step, question.last_step) == (5, 1, 2)
    episodes = question_episodes(store, run_id, question.question_id)
    assert [(e.train_step, e.reward) for e in episodes] == [
        (1, 1.0), (1, 0.0), (2, 1.0), (2, 1.0), (2, 0.5),
    ]  # fmt: skip
    assert played_steps(store, run_id, question.question_id) == [1, 2]
    assert finished_steps(store, run_id) == [1, 2]
    run = store.get_run(run_id)
    assert run is not None
    at_two = run_at_step(store, run, 2)
    assert (at_two.episodes_finished, at_two.mean_reward) == (3, 2.5 / 3)
    # The run keeps every episode it read: the earlier play is still there for its other views.
    assert run.episodes_finished == 8

    # Compare and the Question map take the step as a side the same way.
    at, whole = RunStep(run_id, 2), run_id
    found = store.compare_question([at, whole], question.question_id)
    assert found is not None
    cells = {k: (c.episodes, c.correct, len(c.episode_ids)) for k, c in found.cells.items()}
    assert cells == {at: (3, 2, 3), whole: (8, 3, 8)}
    (row,) = store.compare_outcomes([at])
    assert (row.cells[at].episodes, row.cells[at].correct) == (3, 2)


def test_a_step_whose_rewrite_drops_all_of_it_leaves_the_page(store: Store, tmp_path: Path) -> None:
    dump = tmp_path / "rollouts"
    _write_step(dump, 1, [1.0])
    _write_step(dump, 2, [0.0, 1.0])
    run_id, _ = run_import(store, dump)
    _write_step(dump, 2, [])  # rewritten empty: the resumed trainer has not played it yet
    run_import(store, dump)
    assert [s.train_step for s in training_steps(store, run_id)] == [1]
    assert finished_steps(store, run_id) == [1]
    assert played_again(store, run_id) == PlayedAgain({2: 2})


def test_named_rewards_by_step_are_read_as_the_files_hold_them_now(
    store: Store, tmp_path: Path
) -> None:
    # verl writes each reward-extra column beside `score`: the importer keeps it by name.
    dump = tmp_path / "rollouts"
    _write_step(dump, 1, [1.0, 0.0])
    _write_step(dump, 2, [0.0, 0.0, 0.0])
    run_id, _ = run_import(store, dump)
    assert named_reward_steps(store, run_id) == [
        NamedRewardStep(1, "score", 1.0, 2), NamedRewardStep(2, "score", 0.0, 3)
    ]  # fmt: skip
    _write_step(dump, 2, [1.0, 1.0, 0.5])  # step 2 played again by a resumed trainer
    run_import(store, dump)
    assert named_reward_steps(store, run_id) == [
        NamedRewardStep(1, "score", 1.0, 2), NamedRewardStep(2, "score", 2.5, 3)
    ]  # fmt: skip
