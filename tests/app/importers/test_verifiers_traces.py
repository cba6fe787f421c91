"""verifiers' v1 traces (`traces.jsonl`, verifiers 0.4), written as `write_episode` writes
them (tests/app/importers/writers.py): a trace's message graph becomes the episode's turns,
its model calls time its steps, its weighted rewards sum to the episode's reward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.importers.detect import detect
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import (
    prime_rl_log_episodes,
    verifiers_call,
    verifiers_node,
    verifiers_trace,
    verifiers_write_episode,
)
from tests.support.benchmark import QUESTIONS

COUNT_Q, COUNT_SQL = QUESTIONS[0][1], QUESTIONS[0][2]
START = 1_764_000_000.0
DATA = {"idx": 0, "id": "spider-dev-7", "db_id": "concert_singer", "answer": COUNT_SQL}


def _solver_nodes(answer: str = "ANSWER 6") -> list[dict[str, Any]]:
    """System and question, a run_sql tool call (a v1 `ToolCall`: flat name and arguments),
    the tool's answer, then the answer."""
    call = {"id": "c1", "type": "function", "name": "run_sql",
            "arguments": json.dumps({"sql": COUNT_SQL})}  # fmt: skip
    return [
        verifiers_node({"role": "system", "content": "You answer with SQL."}, None, at=START),
        verifiers_node({"role": "user", "content": COUNT_Q}, 0, at=START),
        verifiers_node({"role": "assistant", "content": "Let me count.", "tool_calls": [call]}, 1,
                       sampled=True, at=START + 1.2),
        verifiers_node({"role": "tool", "tool_call_id": "c1", "content": "| 6 |"}, 2,
                       at=START + 1.3),
        verifiers_node({"role": "assistant", "content": answer}, 3, sampled=True, at=START + 2.0),
    ]  # fmt: skip


def _solver(**fields: Any) -> dict[str, Any]:
    calls = [
        verifiers_call(2, START + 0.1, START + 1.2, 12, finish="tool_calls"),
        verifiers_call(4, START + 1.35, START + 2.0, 3),
    ]
    rewards = {"correct": {"score": 1.0, "weight": 1.0}, "format": {"score": 0.5, "weight": 0.2}}
    return verifiers_trace(
        DATA, _solver_nodes(), calls, rewards=rewards, start=START, end=START + 2.1, **fields
    ) | {"metrics": {"turns": 2.0}}


def _judge() -> dict[str, Any]:
    """A judge's trace beside the solver's (an agentic-judge env), not trained on."""
    nodes = [
        verifiers_node({"role": "user", "content": "Is ANSWER 6 right?"}, None, at=START),
        verifiers_node({"role": "assistant", "content": "yes"}, 0, sampled=True, at=START + 3),
    ]
    return verifiers_trace(
        DATA, nodes, [verifiers_call(1, START + 2.5, START + 3.0, 1)], rewards={},
        start=START + 2.2, end=START + 3.1, name="judge", trainable=False,
    )  # fmt: skip


def _episode(traces: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "id": "e1",
        "env": {"id": "sql-env"},
        "task": {"type": "SqlTask", "data": DATA},
        "group": {"id": "g-7"},
        "run": {"type": "train", "id": "r1", "work": {"type": "train", "step": 12}},
        "ok": True,
        "is_timeout": False,
        "errors": [],
        "traces": traces,
    } | fields


def test_a_v1_trace_is_an_episode_of_its_trained_agents_turns(store: Store, tmp_path: Path) -> None:
    run_dir = tmp_path / "outputs" / "sql-env--tiny-sql--default--ab12cd34"
    verifiers_write_episode(run_dir, _episode([_judge(), _solver()]))
    # `save_config` (verifiers/v1/cli/output.py): the resolved config, the model in it.
    (run_dir / "configs" / "resolved").mkdir(parents=True)
    resolved = {"model": "tiny-sql-1b", "output_dir": "outputs"}
    (run_dir / "configs" / "resolved" / "eval.json").write_text(json.dumps(resolved, indent=2))
    found = detect(tmp_path / "outputs")
    assert found is not None and found.name == "verifiers"
    run_id, _ = run_import(store, tmp_path / "outputs", "v1")
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint == "tiny-sql-1b"
    [episode] = rows(
        store,
        "SELECT id, question_id, question, db_id, gold_sql, reward, outcome, train_step, "
        "duration_seconds, tokens_out, mean_logprob FROM episodes WHERE run_id = ?",
        run_id,
    )
    assert episode[1:5] == ("spider-dev-7", COUNT_Q, "concert_singer", COUNT_SQL)
    assert episode[5] == pytest.approx(1.0 + 0.5 * 0.2)  # each reward's score times its weight
    assert episode[6:8] == ("correct", 12)  # rewarded; the training step its run's work names
    assert episode[8] == pytest.approx(2.1) and episode[9] == 12 + 3
    assert episode[10] is None  # an eval's trace holds no token log-probabilities
    steps = rows(
        store,
        "SELECT action, argument, observation, policy_seconds, env_seconds FROM steps "
        "WHERE episode_id = ? ORDER BY step_no",
        episode[0],
    )
    assert steps == [
        # The tool's answer: from the first call's end to the second's start.
        ("QUERY", COUNT_SQL, "| 6 |", pytest.approx(1.1), pytest.approx(0.15)),
        ("ANSWER", "6", None, pytest.approx(0.65), None),
    ]
    named = rows(store, "SELECT name, value FROM episode_rewards ORDER BY name")
    assert named == [
        ("correct", 1.0), ("format", pytest.approx(0.1)), ("reward", pytest.approx(1.1)),
        ("turns", 2.0),
    ]  # fmt: skip
    detail = store.get_episode(episode[0])
    assert detail is not None
    assert [m["role"] for m in detail.steps[1].prompt] == ["system", "user", "assistant", "tool"]
    # The tool call stored as OpenAI writes one, as every other format's are.
    assert detail.steps[1].prompt[2]["tool_calls"][0]["function"]["name"] == "run_sql"


def test_the_last_branch_of_a_graph_is_the_conversation(store: Store, tmp_path: Path) -> None:
    """A compacted conversation: the first answer's branch is left, the summary's branch
    (the last leaf) holds the turns the episode ends with."""
    nodes = _solver_nodes(answer="ANSWER 5")
    nodes.append(verifiers_node({"role": "user", "content": "Summary: the count is 6."}, 1))
    nodes.append(verifiers_node({"role": "assistant", "content": "ANSWER 6"}, 5, sampled=True))
    calls = [verifiers_call(i, START, START + 0.5, 2) for i in (2, 4, 6)]
    trace = verifiers_trace(DATA, nodes, calls, rewards={}, start=START, end=START + 1)
    verifiers_write_episode(tmp_path / "run", _episode([trace]))
    run_id, _ = run_import(store, tmp_path / "run", "branches")
    [(episode_id,)] = rows(store, "SELECT id FROM episodes WHERE run_id = ?", run_id)
    detail = store.get_episode(episode_id)
    assert detail is not None
    assert [(s.action, s.argument) for s in detail.steps] == [("ANSWER", "6")]
    assert [m["content"] for m in detail.steps[0].prompt] == [
        "You answer with SQL.",
        COUNT_Q,
        "Summary: the count is 6.",
    ]


def test_a_trace_cut_at_its_token_limit_or_failed_says_so(store: Store, tmp_path: Path) -> None:
    cut = _solver(stop_condition="max_output_tokens")
    failed = _solver(ok=False, errors=[{"type": "ProviderError", "message": "overloaded"}])
    for trace, qid in ((cut, "cut"), (failed, "failed")):
        trace["task"]["data"] = DATA | {"id": qid}
        verifiers_write_episode(tmp_path / "run", _episode([trace]))
    run_id, _ = run_import(store, tmp_path / "run", "ends")
    found = rows(
        store,
        "SELECT e.question_id, e.outcome, e.error, s.truncated FROM episodes e "
        "JOIN steps s ON s.episode_id = e.id AND s.step_no = e.steps WHERE e.run_id = ? "
        "ORDER BY e.id",
        run_id,
    )
    assert found == [
        ("cut", "correct", None, 1),
        ("failed", "error", "ProviderError: overloaded", 0),
    ]


def test_an_episode_failed_before_its_first_turn_is_an_error_episode_of_no_steps(
    store: Store, tmp_path: Path
) -> None:
    # prime-rl writes an episode whose sandbox never started (no trace), and a trace whose
    # first model call failed (its prompt, no sampled message).
    task = {"type": "SqlTask", "data": DATA | {"id": "q-box", "prompt": [
        {"role": "user", "content": "How many singers are there?"}]}}  # fmt: skip
    sandbox = _episode([], task=task, ok=False,
                       errors=[{"type": "SandboxError", "message": "no box"}])  # fmt: skip
    first_call = _solver(errors=[{"type": "ProviderError", "message": "context too long"}])
    first_call["nodes"] = first_call["nodes"][:2]
    first_call["calls"] = []
    first_call["task"]["data"] = DATA | {"id": "q-call"}
    for episode in (sandbox, _episode([first_call], ok=False), _episode([_solver()])):
        verifiers_write_episode(tmp_path / "run", episode)
    run_id, (result,) = run_import(store, tmp_path / "run", "failures")
    assert (result.episodes, result.skipped) == (3, 0)
    assert rows(
        store,
        "SELECT question_id, question, outcome, failure_class, error, steps, reward, "
        "(SELECT count(*) FROM episode_rewards r WHERE r.episode_id = e.id) "
        "FROM episodes e WHERE run_id = ? ORDER BY id",
        run_id,
    ) == [
        ("q-box", "How many singers are there?", "error", "env_error", "SandboxError: no box",
         0, 0.0, 0),
        ("q-call", COUNT_Q, "error", "env_error", "ProviderError: context too long", 0, 1.1, 4),
        ("spider-dev-7", COUNT_Q, "correct", "correct", None, 2, 1.1, 4),
    ]  # fmt: skip
    run = store.get_run(run_id)
    assert run is not None and (run.episodes_finished, run.skipped_lines) == (3, 0)


def test_a_trainers_trace_gives_its_tokens_mean_log_probability(
    store: Store, tmp_path: Path
) -> None:
    nodes = [
        verifiers_node({"role": "user", "content": COUNT_Q}, None),
        verifiers_node({"role": "assistant", "content": "<sql>SELECT 1</sql>"}, 0, sampled=True,
                       logprobs=[-0.5, -1.5]),
        verifiers_node({"role": "user", "content": "| 1 |"}, 1),
        verifiers_node({"role": "assistant", "content": "ANSWER 1"}, 2, sampled=True,
                       logprobs=[-0.25, -0.25, -0.5]),
    ]  # fmt: skip
    calls = [verifiers_call(1, START, START + 1, 2), verifiers_call(3, START + 1, START + 2, 3)]
    trace = verifiers_trace(DATA, nodes, calls, rewards={}, start=START, end=START + 2.1)
    verifiers_write_episode(tmp_path / "run", _episode([trace]))
    # Without usage reported, the tokens are counted by their log-probabilities.
    unreported = [{k: v for k, v in c.items() if k != "usage"} for c in calls]
    verifiers_write_episode(tmp_path / "run", _episode([trace | {"calls": unreported}]))
    run_id, _ = run_import(store, tmp_path / "run", "trained")
    found = rows(store, "SELECT tokens_out, mean_logprob FROM episodes WHERE run_id = ?", run_id)
    assert found == [(2 + 3, pytest.approx(-3.0 / 5)), (5, pytest.approx(-3.0 / 5))]
    # Log-probabilities whose sum is past what a float holds have no mean: the rollout is
    # kept without one (its mean stopped the import with a traceback).
    nodes[1]["logprobs"] = [-1e308, -1e308]
    verifiers_write_episode(tmp_path / "huge", _episode([trace | {"nodes": nodes}]))
    run_id, _ = run_import(store, tmp_path / "huge", "huge")
    assert rows(store, "SELECT mean_logprob FROM episodes WHERE run_id = ?", run_id) == [(None,)]


def test_prime_rl_rollouts_import_each_training_step_once_in_step_order(
    store: Store, tmp_path: Path
) -> None:
    output_dir = tmp_path / "prime-rl-out"

    def episode(step: int, sample: int, sent: int) -> dict[str, Any]:
        trace = _solver()
        trace["task"]["data"] = DATA | {"id": f"q-{step}-{sample}"}
        work = {"type": "train", "step": sent}  # the step it was sent out at
        return _episode([trace], id=f"e-{step}-{sample}", run={"type": "train", "id": "r",
                        "work": work})  # fmt: skip

    for step in (1, 2, 10):  # step_10 sorts before step_2 as text
        done = [episode(step, sample, sent=max(step - 1, 0)) for sample in range(2)]
        for one in done:  # `all` grows an episode at a time
            prime_rl_log_episodes(output_dir, [one], step, "train", "all")
        prime_rl_log_episodes(output_dir, done[:1], step, "train", "effective")
        prime_rl_log_episodes(output_dir, [episode(step, 9, step)], step, "eval", "all")
    rollouts = output_dir / "rollouts"
    found = detect(rollouts)
    assert found is not None and found.name == "verifiers"
    assert [p.relative_to(rollouts).as_posix() for p in found.files(rollouts)] == [
        "step_1/train/all/traces.jsonl",
        "step_2/train/all/traces.jsonl",
        "step_10/train/all/traces.jsonl",
    ]
    run_id, _ = run_import(store, rollouts, "prime-rl")
    assert rows(
        store, "SELECT train_step, question_id FROM episodes WHERE run_id = ? ORDER BY id", run_id
    ) == [(1, "q-1-0"), (1, "q-1-1"), (2, "q-2-0"), (2, "q-2-1"), (10, "q-10-0"), (10, "q-10-1")]
    # A step's evaluation imports as a run of its own.
    eval_id, _ = run_import(store, rollouts / "step_2" / "eval", "prime-rl-eval")
    assert rows(
        store, "SELECT train_step, question_id FROM episodes WHERE run_id = ?", eval_id
    ) == [(2, "q-2-9")]


def test_each_trained_agents_trace_of_an_episode_is_an_episode_of_its_line(
    store: Store, tmp_path: Path
) -> None:
    """Two trained agents answer the same task (self-play) beside an untrained judge: the
    line gives an episode each (verifiers scores every trained agent's trace), from the same
    line, as samples of one group; importing it again finds both held."""
    calls = [verifiers_call(i, START, START + 0.5, 2) for i in (2, 4)]
    wrong = verifiers_trace(
        DATA, _solver_nodes(answer="ANSWER 5"), calls, start=START, end=START + 1,
        rewards={"correct": {"score": 0.0, "weight": 1.0}}, name="second",
    )  # fmt: skip
    path = verifiers_write_episode(tmp_path / "run", _episode([_judge(), _solver(), wrong]))
    notes: list[str] = []
    run_id, [result] = run_import(store, tmp_path / "run", "self-play", on_note=notes.append)
    assert result.episodes == 2 and result.skipped == 0
    got = rows(
        store,
        "SELECT e.sample_index, e.group_index, e.reward, s.line, st.argument FROM episodes e "
        "JOIN episode_sources s ON s.episode_id = e.id "
        "JOIN steps st ON st.episode_id = e.id AND st.action = 'ANSWER' "
        "WHERE e.run_id = ? ORDER BY e.sample_index",
        run_id,
    )
    assert got == [(0, 0, pytest.approx(1.1), 1, "6"), (1, 0, 0.0, 1, "5")]
    assert rows(store, "SELECT agent FROM episode_sources ORDER BY episode_id") == [
        ("agent",),
        ("second",),
    ]
    assert rows(
        store, "SELECT episodes_planned, finished_episodes FROM runs WHERE id = ?", run_id
    ) == [(2, 2)]
    # Again, with a line of one agent appended: only that line is new.
    verifiers_write_episode(tmp_path / "run", _episode([_solver()], id="e2"))
    _, [again] = run_import(store, path.parent, "self-play", on_note=notes.append)
    assert (again.episodes, again.known) == (1, 0)  # read on from the first line's end
    _, [third] = run_import(store, path.parent, "self-play", on_note=notes.append)
    assert (third.episodes, third.already) == (0, True)
    # Rewritten (its lines swapped): each line is found held with the episodes it gave.
    first, second = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(second + first)
    _, [swapped] = run_import(store, path.parent, "self-play", on_note=notes.append)
    assert (swapped.episodes, swapped.known) == (0, 2)
    assert rows(store, "SELECT count(*) FROM episodes WHERE run_id = ?", run_id) == [(3,)]
    assert notes == []
