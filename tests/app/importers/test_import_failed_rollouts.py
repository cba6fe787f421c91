"""A rollout that failed before its model's first turn (verifiers' `error` with an empty
completion; rLLM's `error` or `timeout` termination with no step) is an `error` episode of no
steps with the file's message, as docs/import.md ("Cut turns and failed rollouts") says and a
v1 trace's is: it counts against the run's accuracy, not as a bad line. A rollout with no turn
and no error saying why stays a bad line."""

from __future__ import annotations

from pathlib import Path

from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.test_other_formats import COUNT_Q, COUNT_SQL, _rllm_episode
from tests.app.importers.writers import rllm_log_episode, verifiers_save, verifiers_timing

EPISODES = (
    "SELECT e.outcome, e.failure_class, e.error, e.steps, e.reward FROM episodes e "
    "JOIN runs r ON r.id = e.run_id WHERE r.name = ? ORDER BY e.id"
)
RUN = "SELECT finished_episodes, correct_episodes, error_episodes, skipped_lines FROM runs "


def test_a_verifiers_rollout_that_failed_before_its_first_turn_is_an_error_episode(
    store: Store, tmp_path: Path
) -> None:
    base = {
        "prompt": [{"role": "user", "content": COUNT_Q}],
        "answer": COUNT_SQL,
        "info": {"db_id": "concerts"},
    }
    answered = [{"role": "assistant", "content": f"<solution>{COUNT_SQL}</solution>"}]
    # `state_to_output` of a rollout whose sandbox never started: no completion, the
    # exception's repr as `save_outputs` writes it, a timing that was never scored.
    failed = base | {
        "example_id": 0,
        "completion": [],
        "reward": 0.0,
        "error": "InfraError('sandbox down')",
        "timing": verifiers_timing(1_700_000_000.0, [], [], scored=False),
    }
    verifiers_save(
        tmp_path / "outputs" / "evals" / "sql--m" / "r1",
        [
            base | {"example_id": 0, "completion": answered, "reward": 1.0},
            failed,
            base | {"example_id": 1, "completion": [], "reward": 0.0},  # no error: a bad line
        ],
        {"env_id": "sql", "model": "m"},
    )
    run_import(store, tmp_path / "outputs", "vf")
    assert rows(store, EPISODES, "vf") == [
        ("correct", "correct", None, 1, 1.0),
        ("error", "env_error", "InfraError('sandbox down')", 0, 0.0),
    ]
    assert rows(store, RUN + "WHERE name = 'vf'") == [(2, 1, 1, 1)]
    assert rows(store, "SELECT count(*) FROM steps WHERE episode_id = 2") == [(0,)]


def test_rllm_episodes_that_failed_before_a_step_are_error_episodes(
    store: Store, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    rllm_log_episode(logs, _rllm_episode("task-a", 0, True), step=1)
    # A workflow that raised, or ran out of time, before the model's first response: rLLM's
    # Episode holds a trajectory without steps, or none.
    errored = _rllm_episode("task-a", 1, False) | {"termination_reason": "error"}
    errored["trajectories"] = [{"reward": 0.0, "steps": []}]
    timed_out = _rllm_episode("task-a", 2, False) | {"termination_reason": "timeout"}
    timed_out["trajectories"] = []
    unexplained = _rllm_episode("task-a", 3, False) | {"trajectories": []}  # env_done: bad
    for episode in (errored, timed_out, unexplained):
        rllm_log_episode(logs, episode, step=1)
    run_import(store, logs, "rllm")
    found = sorted(rows(store, EPISODES, "rllm"), key=str)
    assert found == [
        ("correct", "correct", None, 2, 1.0),
        ("error", "env_error", "rLLM ended the episode: error", 0, 0.0),
        ("error", "env_error", "rLLM ended the episode: timeout", 0, 0.0),
    ]
    assert rows(store, RUN + "WHERE name = 'rllm'") == [(3, 1, 2, 1)]
    # The failed episodes are samples of their task's group at the step, as rLLM groups them.
    assert rows(store, "SELECT count(DISTINCT group_index), min(train_step) FROM episodes") == [
        (1, 1)
    ]
