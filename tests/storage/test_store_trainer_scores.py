"""A trainer's own scores of recorded episodes (`Store.record_trainer_scores`): the advantage
it gave each and its reward functions' values, and the GRPO groups and Training counts that
follow the trainer's advantages where it reported them."""

from __future__ import annotations

from storage.read_models import GroupKey
from storage.store import Store
from storage.trainer_scores import TrainerScore
from storage.training import training_steps
from tests.support.records import spec
from tests.support.stores import play_group


def _ids(store: Store, run_id: int, key: GroupKey) -> list[int]:
    found = store.get_group(run_id, key)
    assert found is not None
    return [m.detail.summary.id for m in found.members]


def test_groups_count_as_signal_by_the_trainers_advantages(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=14)
    sink = store.sink(run_id)
    # All wrong, the environment's shaping spreads them: a trainer rewarding correctness
    # alone gave every sample advantage 0.
    play_group(sink, "q1", range(3), [0.0, 0.05, -0.01], (0, 0))
    # Equal environment rewards, but the trainer's own terms (a format reward) spread them.
    play_group(sink, "q2", range(3), [0.0, 0.0, 0.0], (0, 1))
    # Shaping spread, and the trainer reported no advantage for one sample: the rewards decide.
    play_group(sink, "q3", range(3), [0.0, 0.05, 0.0], (1, 2))
    # Right and wrong.
    play_group(sink, "q4", range(3), [1.0, 0.0, 0.0], (1, 3))
    # Alone at its step: shaping the trainer gave no advantage.
    play_group(sink, "q5", range(2), [0.0, -0.01], (2, 4))
    before = store.group_overview(run_id).by_source
    assert before == {"correctness": 1, "shaping only": 3, "none": 1}
    assert training_steps(store, run_id)[2].frac_reward_zero_std == 0.0

    flat, spread, partial, mixed, alone = (
        _ids(store, run_id, GroupKey(q, g))
        for q, g in (("q1", 0), ("q2", 1), ("q3", 2), ("q4", 3), ("q5", 4))
    )
    scores = [
        *(TrainerScore(i, 0.0, {"correct_reward": 0.0}) for i in [*flat, *alone]),
        *(TrainerScore(i, a, {"format": a}) for i, a in zip(spread, [0.5, -1.0, 0.5], strict=True)),
        TrainerScore(partial[0], 0.0, {}),
        *(TrainerScore(i, a, {}) for i, a in zip(mixed, [1.1, -0.6, -0.6], strict=True)),
    ]
    assert store.record_trainer_scores(run_id, scores) == 12

    overview = store.group_overview(run_id)
    assert overview.by_source == {"correctness": 1, "shaping only": 2, "none": 2}
    assert overview.trainer_judged == 4
    by_question = {g.key.question_id: g for g in overview.groups}
    assert by_question["q1"].source == "none" and by_question["q1"].trainer_advantage == 0.0
    assert by_question["q2"].source == "shaping only"
    assert by_question["q2"].trainer_advantage == 1.0
    assert (
        by_question["q3"].source == "shaping only" and by_question["q3"].trainer_advantage is None
    )
    assert by_question["q4"].source == "correctness"
    # Training's per-step counts and one group's own statistics say the same.
    first, second, third = training_steps(store, run_id)
    assert first.by_source == {"correctness": 0, "shaping only": 1, "none": 1}
    assert second.by_source == {"correctness": 1, "shaping only": 1, "none": 0}
    assert third.by_source == {"correctness": 0, "shaping only": 0, "none": 1}
    assert third.frac_reward_zero_std == 1.0  # as TRL counts it, from its own reward
    detail = store.get_group(run_id, GroupKey("q1", 0))
    assert detail is not None and detail.stats.source == "none"
    assert [m.detail.trainer_advantage for m in detail.members] == [0.0, 0.0, 0.0]
    assert store.episode_origins(flat)[flat[0]].rewards == {"correct_reward": 0.0}


def test_scores_replace_earlier_ones_and_touch_only_the_runs_episodes(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=2)
    other = store.create_run(spec("other", kind="training"), episodes_planned=2)
    play_group(store.sink(run_id), "q1", range(2), [1.0, 0.0], (0, 0))
    play_group(store.sink(other), "q1", range(2), [1.0, 0.0], (0, 0))
    mine = _ids(store, run_id, GroupKey("q1", 0))
    theirs = _ids(store, other, GroupKey("q1", 0))
    store.record_trainer_scores(run_id, [TrainerScore(mine[0], 1.0, {"a": 1.0, "b": 2.0})])
    scored = store.record_trainer_scores(
        run_id,
        [
            TrainerScore(mine[0], 0.7, {"a": 0.5, "nan": float("nan")}),
            TrainerScore(theirs[0], 9.0, {"a": 9.0}),
        ],
    )
    assert scored == 1
    assert store.episode_origins(mine)[mine[0]].rewards == {"a": 0.5}
    episode = store.get_episode(mine[0])
    assert episode is not None and episode.trainer_advantage == 0.7
    untouched = store.get_episode(theirs[0])
    assert untouched is not None and untouched.trainer_advantage is None
    assert theirs[0] not in store.episode_origins(theirs)
